package jetstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/internal/telemetry"
	"github.com/jetembed/jetembed/schema"
)

// Headers of a dead letter, besides the job's own headers and
// [HeaderSubject] (the subject the job was published on).
const (
	HeaderDLQCode      = "Embed-Dlq-Code"
	HeaderDLQMessage   = "Embed-Dlq-Message"
	HeaderDLQJobID     = "Embed-Dlq-Job-Id"
	HeaderDLQDelivered = "Embed-Dlq-Delivered"
	// HeaderDLQSize and HeaderDLQSHA256 are the size in bytes and the
	// SHA-256 (hex) of the job's body as it arrived.
	HeaderDLQSize   = "Embed-Dlq-Size"
	HeaderDLQSHA256 = "Embed-Dlq-Sha256"
	// HeaderDLQExcerpt is "true" on the letter of a job that can never
	// succeed whose body or headers were cut to an excerpt
	// ([consumer.DLQExcerptBytes]): it cannot be replayed.
	HeaderDLQExcerpt = "Embed-Dlq-Excerpt"
)

// publishTimeout bounds a publish whose context has no deadline: a core
// flush needs one, and a result must not wait forever for a stream.
const publishTimeout = 10 * time.Second

// ErrNotConfirmed means a result or dead letter was sent but the server did
// not confirm it; the consumer NAKs the job so it runs again.
var ErrNotConfirmed = errors.New("publish not confirmed")

// ErrReplyLost means the answer to a request could not be delivered
// because the connection it arrived on was lost: the server refuses the
// answer after a reconnect, as the right to answer ended with the old
// connection. It is transient, never [consumer.ErrPublishDenied].
var ErrReplyLost = fmt.Errorf("%w: request reply lost to a reconnect", ErrNotConfirmed)

// Publisher sends the consumer's results and dead letters; it implements
// [consumer.Publisher].
//
// A result for a subject of the results stream is published to JetStream
// with Nats-Msg-Id set to the msgID it is given (derived from the job's
// reply and id) and returns only once the stream acknowledged it (a redelivered job's second result is dropped by the
// stream's duplicate window). Any other subject, such as a requester's
// inbox, is a core publish followed by a flush: the server has the message,
// which is all core NATS can confirm.
type Publisher struct {
	nc      *nats.Conn
	js      natsjs.JetStream
	results []string // the results stream's subjects
	resName string
	dlqName string
	dlqBase string // DLQ subject prefix, ending in "."

	usageName   string // "" when the config names no usage stream
	usagePrefix string // its subject less ".>"

	blobName string
	blobMu   sync.Mutex
	blobs    natsjs.ObjectStore // bound on first PutBlob
}

// NewPublisher returns the publisher for the streams of cfg (only the
// results and DLQ streams' names and subjects are used).
func NewPublisher(nc *nats.Conn, cfg Config) (*Publisher, error) {
	js, err := natsjs.New(nc)
	if err != nil {
		return nil, fmt.Errorf("publisher: %w", err)
	}
	if len(cfg.DLQ.Subjects) == 0 || len(cfg.Results.Subjects) == 0 {
		return nil, fmt.Errorf("%w: publisher needs the results and dlq subjects", ErrConfig)
	}
	base := strings.TrimSuffix(strings.TrimSuffix(cfg.DLQ.Subjects[0], ">"), "*")
	if !strings.HasSuffix(base, ".") {
		base += "."
	}
	p := &Publisher{
		nc: nc, js: js,
		results: cfg.Results.Subjects, resName: cfg.Results.Name,
		dlqName: cfg.DLQ.Name, dlqBase: base, blobName: cfg.Blobs.Name,
	}
	if cfg.Usage.Name != "" && len(cfg.Usage.Subjects) > 0 {
		p.usageName = cfg.Usage.Name
		p.usagePrefix = usagePrefix(cfg.Usage.Subjects[0])
	}
	return p, nil
}

var (
	_ consumer.Publisher      = (*Publisher)(nil)
	_ consumer.PayloadLimiter = (*Publisher)(nil)
	_ consumer.BlobStore      = (*Publisher)(nil)
)

// PublishResult implements [consumer.Publisher].
func (p *Publisher) PublishResult(ctx context.Context, subject, msgID string, header map[string][]string, data []byte) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	h := nats.Header(header)
	if h == nil {
		h = nats.Header{}
	}
	telemetry.InjectHeaders(ctx, h)
	m := &nats.Msg{Subject: subject, Header: h, Data: data}
	if !matchesAny(p.results, subject) {
		return confirmCore(ctx, p.nc, subject, func() error { return p.nc.PublishMsg(m) })
	}
	opts := []natsjs.PublishOpt{natsjs.WithExpectStream(p.resName)}
	if msgID != "" {
		opts = append(opts, natsjs.WithMsgID(msgID))
	}
	t := deniedTracker(p.nc)
	mark := t.mark()
	if _, err := p.js.PublishMsg(ctx, m, opts...); err != nil {
		// A denied stream publish is never answered: the request times
		// out, and the violation says why.
		if t.deniedSince(ctx, mark, subject, nil) {
			return deniedError(subject)
		}
		return fmt.Errorf("%w: result to %s: %w", ErrNotConfirmed, subject, err)
	}
	return nil
}

// MaxPayload implements [consumer.PayloadLimiter]: the connected server's
// max_payload.
func (p *Publisher) MaxPayload() int64 { return p.nc.MaxPayload() }

// PutBlob implements [consumer.BlobStore] on the blobs Object Store bucket
// (bound on first use; provisioning creates it).
func (p *Publisher) PutBlob(ctx context.Context, name string, header map[string][]string, data []byte) (schema.Blob, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	obs, err := p.blobStore(ctx)
	if err != nil {
		return schema.Blob{}, err
	}
	meta := natsjs.ObjectMeta{Name: name, Headers: nats.Header{}}
	if ct := first(header, schema.HeaderContentType); ct != "" {
		meta.Headers.Set(schema.HeaderContentType, ct)
	}
	info, err := obs.Put(ctx, meta, bytes.NewReader(data))
	if err != nil {
		return schema.Blob{}, fmt.Errorf("%w: blob %s in %s: %w", ErrNotConfirmed, name, p.blobName, err)
	}
	return schema.Blob{Name: info.Name, Size: int64(info.Size), Digest: info.Digest}, nil
}

func (p *Publisher) blobStore(ctx context.Context) (natsjs.ObjectStore, error) {
	p.blobMu.Lock()
	defer p.blobMu.Unlock()
	if p.blobs != nil {
		return p.blobs, nil
	}
	obs, err := p.js.ObjectStore(ctx, p.blobName)
	if err != nil {
		return nil, fmt.Errorf("blobs bucket %s: %w", p.blobName, err)
	}
	p.blobs = obs
	return obs, nil
}

// PublishDLQ implements [consumer.Publisher]: the job's body and headers go
// to <dlq prefix>.<code>.<tenant> ([DeadLetterSubject]) with the reason in
// the Embed-Dlq-* headers, and the DLQ stream must confirm it.
func (p *Publisher) PublishDLQ(ctx context.Context, dl consumer.DeadLetter, header map[string][]string, data []byte) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	h := make(nats.Header, len(header)+4)
	for k, v := range header {
		// The job's dedupe id and stream expectations would make the DLQ
		// stream drop or refuse the copy; the letter's own headers are
		// ours alone, never the producer's.
		if lk := strings.ToLower(k); strings.HasPrefix(lk, "nats-") || strings.HasPrefix(lk, "embed-dlq-") {
			continue
		}
		// The tenant is the consumer's word, never the producer's.
		if strings.EqualFold(k, schema.HeaderTenant) {
			continue
		}
		h[k] = v
	}
	code := dl.Code
	if code == "" {
		code = string(schema.CodeInternal)
	}
	h.Set(HeaderDLQCode, code)
	h.Set(HeaderDLQMessage, dl.Message)
	h.Set(HeaderDLQJobID, dl.JobID)
	if dl.Tenant != "" {
		h.Set(schema.HeaderTenant, dl.Tenant)
	}
	h.Set(HeaderDLQDelivered, strconv.FormatUint(dl.NumDelivered, 10))
	if dl.BodySHA256 != "" {
		h.Set(HeaderDLQSize, strconv.Itoa(dl.BodySize))
		h.Set(HeaderDLQSHA256, dl.BodySHA256)
	}
	if dl.Excerpt {
		h.Set(HeaderDLQExcerpt, "true")
	}
	m := &nats.Msg{Subject: DeadLetterSubject(p.dlqBase, code, dl.Tenant), Header: h, Data: data}
	opts := []natsjs.PublishOpt{natsjs.WithExpectStream(p.dlqName)}
	// One dead letter per job and reason, even if the TERM is lost and the
	// job terminated again.
	if dl.MsgID != "" {
		opts = append(opts, natsjs.WithMsgID(dl.MsgID))
	} else if dl.JobID != "" {
		opts = append(opts, natsjs.WithMsgID("dlq:"+code+":"+dl.JobID))
	}
	if _, err := p.js.PublishMsg(ctx, m, opts...); err != nil {
		return fmt.Errorf("%w: dead letter of job %q: %w", ErrNotConfirmed, dl.JobID, err)
	}
	return nil
}

// DeadLetterSubject is where a dead letter of tenant with code is stored:
// <base><code>.<tenant>, or <base><code> without a tenant (base ends in
// "."). The tenant token makes the stream's per-subject cap
// (MaxMsgsPerSubject) a cap per tenant: a tenant's junk evicts only its
// own letters.
func DeadLetterSubject(base, code, tenant string) string {
	if tenant == "" {
		return base + subjectToken(code)
	}
	return base + subjectToken(code) + "." + subjectToken(tenant)
}

func withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, publishTimeout)
}

// matchesAny reports whether subject is matched by one of the filters,
// with NATS wildcards (* one token, > the rest).
func matchesAny(filters []string, subject string) bool {
	for _, f := range filters {
		if matchSubject(f, subject) {
			return true
		}
	}
	return false
}

func matchSubject(filter, subject string) bool {
	ft, st := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, f := range ft {
		if f == ">" {
			return len(st) > i
		}
		if i >= len(st) || (f != "*" && f != st[i]) {
			return false
		}
	}
	return len(ft) == len(st)
}

// subjectToken makes s usable as one subject token ([client.Token]).
func subjectToken(s string) string { return client.Token(s) }
