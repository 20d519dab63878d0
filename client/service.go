package client

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
// on its info endpoint (its micro service info, as $SRV.INFO would say).
type ServiceMember struct {
	// ID is the micro service instance id.
	ID      string
	Version string
	// Model is the model it serves (its [schema.MetaModel] metadata).
	Model string
	// InteractiveTokens is its interactive capacity, the estimated tokens
	// of requests it holds at once ([schema.MetaInteractiveTokens]); 0 when
	// it does not say.
	InteractiveTokens int
	// MaxTokens is the longest text it embeds ([schema.MetaMaxTokens]); 0
	// when it does not say.
	MaxTokens int
}

// MemberOf reads a member from its micro service info (what the info
// endpoint answers, or micro.Service.Info of the process's own service).
func MemberOf(info micro.Info) ServiceMember {
	m := ServiceMember{ID: info.ID, Version: info.Version, Model: info.Metadata[schema.MetaModel]}
	if n, err := strconv.Atoi(info.Metadata[schema.MetaInteractiveTokens]); err == nil && n > 0 {
		m.InteractiveTokens = n
	}
	if n, err := strconv.Atoi(info.Metadata[schema.MetaMaxTokens]); err == nil && n > 0 {
		m.MaxTokens = n
	}
	return m
}

// infoSubject is the info endpoint of the client's tenant
// (embed.v1.info.<tenant>), the bare embed.v1.info without one. Every
// member answers it as $SRV.INFO.embed would, but only to a reply its
// reply policy allows: micro's own $SRV handlers answer any reply subject
// with the embedder's permissions, so only operators may publish $SRV
// (see deploy/nats/accounts.conf).
func (c *Client) infoSubject() string {
	if c.o.tenant == "" {
		return schema.SubjectInfo
	}
	return schema.SubjectInfo + "." + c.o.tenant
}

// PingService asks the embed service who serves it: the first member to
// answer the info endpoint of the client's tenant, bounded by ctx (give it
// a deadline). When no member is subscribed the error wraps
// [ErrNoService].
func (c *Client) PingService(ctx context.Context) (ServiceMember, error) {
	subject := c.infoSubject()
	msg, err := c.nc.RequestWithContext(ctx, subject, nil)
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
	return MemberOf(info), nil
}

// ServiceMembers asks every member of the embed service who it is: the
// answers on the info endpoint of the client's tenant that arrive until
// linger has passed after the first one (or ctx ends), one per member.
// When none answers the error wraps [ErrNoService].
func (c *Client) ServiceMembers(ctx context.Context, linger time.Duration) ([]ServiceMember, error) {
	subject := c.infoSubject()
	inbox := c.nc.NewInbox()
	sub, err := c.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("members of %s: %w", subject, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// A fleet of thousands still answers in a bounded number of messages.
	_ = sub.SetPendingLimits(4096, 16<<20)
	if err := c.nc.PublishRequest(subject, inbox, nil); err != nil {
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
		members = append(members, MemberOf(info))
	}
}
