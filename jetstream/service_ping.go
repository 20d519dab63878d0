package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/jetembed/jetembed/schema"
)

// ServiceMember is what one member of the embed service says about itself
// in its $SRV.INFO answer.
type ServiceMember struct {
	// ID is the micro service instance id.
	ID      string
	Version string
	// Model is the model it serves (the "model" metadata of [StartService]).
	Model string
	// InteractiveTokens is its interactive capacity, the estimated tokens
	// of requests it holds at once (the [MetaInteractiveTokens]
	// metadata); 0 when it does not say.
	InteractiveTokens int
	// MaxTokens is the longest text it embeds ([MetaMaxTokens]); 0 when
	// it does not say.
	MaxTokens int
}

// MetaInteractiveTokens is the service metadata key under which a member
// publishes its interactive capacity (serve's --interactive-tokens): a
// gateway sizes the parts of its calls and its window by it.
const MetaInteractiveTokens = "interactive_tokens"

// MetaMaxTokens is the service metadata key of a member's longest text in
// tokens (the model's maximum, or serve's --max-tokens).
const MetaMaxTokens = "max_tokens"

// The info endpoint: every member of the service answers a request on
// embed.v1.info (and embed.v1.info.<tenant>) with its micro service info,
// as $SRV.INFO.embed would, but only to a reply its reply policy allows:
// micro's own $SRV handlers answer any reply subject with the embedder's
// permissions, so only operators may publish $SRV (see
// deploy/nats/accounts.conf); tenants (the gateway) read the members'
// capacity here.
const (
	InfoName    = "info"
	InfoSubject = "embed.v1.info"
)

// info answers a request of the info endpoint with this member's info.
func (s *service) info(it queued) {
	body, err := json.Marshal(s.Service.Info())
	if err != nil {
		s.answerErr(it, schema.Errorf(schema.CodeInternal, "the info does not encode"))
		return
	}
	h := micro.Headers{schema.HeaderContentType: {schema.MediaTypeJSON}}
	if err := it.req.Respond(body, micro.WithHeaders(h)); err != nil {
		s.answerFailed(it.req, err)
	}
}

// infoSubject is the info endpoint of tenant ("" for the bare one).
func infoSubject(tenant string) string {
	if tenant == "" {
		return InfoSubject
	}
	return InfoSubject + "." + tenant
}

func memberOf(info micro.Info) ServiceMember {
	m := ServiceMember{ID: info.ID, Version: info.Version, Model: info.Metadata["model"]}
	if n, err := strconv.Atoi(info.Metadata[MetaInteractiveTokens]); err == nil && n > 0 {
		m.InteractiveTokens = n
	}
	if n, err := strconv.Atoi(info.Metadata[MetaMaxTokens]); err == nil && n > 0 {
		m.MaxTokens = n
	}
	return m
}

// PingService asks the embed service who serves it: the first member to
// answer its bare info endpoint ([InfoSubject]), bounded by ctx (give it a
// deadline). When no member is subscribed the error wraps [ErrNoService].
// A tenant asks [PingTenant].
func PingService(ctx context.Context, nc *nats.Conn) (ServiceMember, error) {
	return PingTenant(ctx, nc, "")
}

// PingTenant is [PingService] on tenant's info endpoint
// (embed.v1.info.<tenant>), the one its permissions allow.
func PingTenant(ctx context.Context, nc *nats.Conn, tenant string) (ServiceMember, error) {
	subject := infoSubject(tenant)
	msg, err := nc.RequestWithContext(ctx, subject, nil)
	if errors.Is(err, nats.ErrNoResponders) {
		return ServiceMember{}, fmt.Errorf("%w on %s: %w", ErrNoService, subject, err)
	}
	if err != nil {
		return ServiceMember{}, fmt.Errorf("ping %s: %w", subject, err)
	}
	var info micro.Info
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		return ServiceMember{}, fmt.Errorf("ping %s: the answer does not decode: %w", subject, err)
	}
	return memberOf(info), nil
}

// ServiceMembers asks every member of the embed service who it is: the
// answers on its bare info endpoint ([InfoSubject]) that arrive until
// linger has passed after the first one (or ctx ends), one per member.
// When none answers the error wraps [ErrNoService]. A tenant asks
// [TenantMembers].
func ServiceMembers(ctx context.Context, nc *nats.Conn, linger time.Duration) ([]ServiceMember, error) {
	return TenantMembers(ctx, nc, "", linger)
}

// TenantMembers is [ServiceMembers] on tenant's info endpoint
// (embed.v1.info.<tenant>).
func TenantMembers(ctx context.Context, nc *nats.Conn, tenant string, linger time.Duration) ([]ServiceMember, error) {
	subject := infoSubject(tenant)
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("members of %s: %w", subject, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// A fleet of thousands still answers in a bounded number of messages.
	_ = sub.SetPendingLimits(4096, 16<<20)
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		return nil, fmt.Errorf("members of %s: %w", subject, err)
	}
	var (
		members []ServiceMember
		seen    = map[string]bool{}
	)
	for {
		wctx := ctx
		var cancel context.CancelFunc = func() {}
		if len(members) > 0 {
			wctx, cancel = context.WithTimeout(ctx, linger)
		}
		msg, err := sub.NextMsgWithContext(wctx)
		cancel()
		if err != nil {
			if len(members) > 0 {
				return members, nil
			}
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return nil, fmt.Errorf("%w on %s: %w", ErrNoService, subject, err)
			}
			return nil, fmt.Errorf("members of %s: %w", subject, err)
		}
		var info micro.Info
		if json.Unmarshal(msg.Data, &info) != nil || info.ID == "" || seen[info.ID] {
			continue
		}
		seen[info.ID] = true
		members = append(members, memberOf(info))
	}
}

// ServicePinger is [PingService] on nc, as a function value.
func ServicePinger(nc *nats.Conn) func(context.Context) (ServiceMember, error) {
	return func(ctx context.Context) (ServiceMember, error) { return PingService(ctx, nc) }
}
