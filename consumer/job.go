package consumer

import (
	"crypto/sha256"
	"encoding/hex"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/schema"
)

// job is one held delivery, from Submit until it is settled.
type job struct {
	a *Arrival
	// req is the request of a request-reply delivery, nil for a stored
	// job; msg (nil for a request) is a stored job's message, delivered
	// its delivery count (1 for a request), storedAt when the stream
	// stored it, inbox the core reply inbox it came with.
	req       *Request
	msg       Message
	delivered uint64
	storedAt  time.Time
	inbox     string
	usageKey  string // its usage event's identity, "" for a request (usage.go)
	enc       schema.Encoding
	// wire is the decoded wire job; nil when the payload did not decode
	// far enough to have one.
	wire *schema.Job
	id   string
	// tenant is the job's tenant, read from the subject it arrived on
	// ("" for none: tenancy off, or a request on the bare service subject).
	tenant string
	// items are the per-text validation errors (invalid_utf8), nil when
	// every text may run.
	items    []*schema.Error
	deadline time.Time // zero: none
	reply    string    // resolved reply subject; "" with Respond or none
	tokens   int       // estimated tokens of the texts that will run
	// interactive jobs (request-reply, or priority "interactive") run in
	// the engine's interactive class, under its own budget.
	interactive bool
	queued      time.Time         // when Submit took it
	run         trace.SpanContext // the span of the Embed call that served it
	// admitted is closed once the engine admitted the job's Embed call,
	// or its run ended without one (Submit waits on it); cancel ends the
	// call (a job leaving the engine's queue, or the hard stop).
	admitted chan struct{}
	cancel   func()
	report   engine.CallReport // what its Embed call ran (no chunks), for its usage

	// mu orders an InProgress against the settlement, so that no
	// heartbeat follows the final acknowledgement.
	mu        sync.Mutex
	settled   bool
	lastTouch time.Time // delivery or last InProgress
	// admittedSet: the engine admitted it; leaving: it is leaving the
	// queue (Drain, or Submit's context ended) and is not woken as
	// admitted; woken: admitted is closed.
	admittedSet, leaving, woken bool
	// budget gives back the engine budget the job holds (nil: none).
	budget func()
}

// header returns the first value of header key, matching the canonical
// form too: nats.Header keeps keys as sent, producers are not consistent.
func header(h map[string][]string, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	if v := h[textproto.CanonicalMIMEHeaderKey(key)]; len(v) > 0 {
		return v[0]
	}
	for k, v := range h {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return v[0]
		}
	}
	return ""
}

// newJob is the job of delivery d, arrived at now, not yet decoded.
func newJob(d Delivery, now time.Time) *job {
	j := &job{a: d.arrival(), delivered: 1, queued: now, lastTouch: now}
	switch d := d.(type) {
	case *Stored:
		j.msg, j.storedAt, j.inbox = d.Msg, d.StoredAt, d.Reply
		j.delivered = max(d.NumDelivered, 1)
		j.usageKey = usageKey(d)
	case *Request:
		j.req, j.inbox = d, d.Reply
	}
	j.enc = schema.EncodingFor(header(j.a.Header, schema.HeaderContentType))
	if !j.a.Received.IsZero() {
		j.lastTouch = j.a.Received
	}
	return j
}

// admit decodes and validates a delivery. It returns the job, and the
// job-level error that refuses it (the job is still returned, to address
// the error result).
func (c *Loop) admit(d Delivery, now time.Time) (*job, *schema.Error) {
	j := newJob(d, now)
	var (
		sj     *schema.Job
		items  []*schema.Error
		jobErr *schema.Error
	)
	switch r := j.req; {
	case r != nil && r.Refusal != nil:
		jobErr = r.Refusal
		// Refused before it was read (a reply the door refused, a bad
		// rerank request): its id, if it names one, still names its
		// dead letter.
		if rj, _, _ := c.cfg.Limits.DecodeJob(j.a.Data, j.enc); rj != nil {
			j.id = rj.ID
		}
	case r != nil && r.Job != nil:
		// Decoded in this process: checked as a decoded body would be,
		// its size by its texts (a lower bound of any encoding of it).
		sj = r.Job
		if jobErr = c.cfg.Limits.CheckPayload(textBytes(sj)); jobErr == nil {
			jobErr, items = c.cfg.Limits.Validate(sj)
		}
	default:
		sj, items, jobErr = c.cfg.Limits.DecodeJob(j.a.Data, j.enc)
	}
	j.wire, j.items = sj, items
	if sj != nil {
		j.id = sj.ID
	}
	if j.id == "" {
		j.id = header(j.a.Header, schema.HeaderMsgID)
	}
	j.interactive = j.req != nil || sj != nil && sj.Interactive()
	// A refused reply wins over any other refusal: it decides that no
	// result goes anywhere. A job whose subject names no tenant has no
	// space to be answered in.
	tenant, tenantErr := c.tenantOf(j)
	j.tenant = tenant
	if j.interactive && j.req == nil && tenantErr == nil && !c.mayInteract(tenant) {
		j.interactive = false
	}
	if tenantErr != nil {
		return j, tenantErr
	}
	reply, replyErr := c.replyOf(j)
	j.reply = reply
	if replyErr != nil {
		return j, replyErr
	}
	if jobErr != nil {
		return j, jobErr
	}
	if t, ok, _ := sj.DeadlineTime(); ok {
		j.deadline = given(t)
	} else if h := header(j.a.Header, schema.HeaderDeadline); h != "" {
		t, err := time.Parse(time.RFC3339, h)
		if err != nil {
			return j, schema.Errorf(schema.CodeBadPayload, "%s header is not RFC 3339", schema.HeaderDeadline)
		}
		j.deadline = given(t)
	}
	for i, t := range sj.Texts {
		if i < len(items) && items[i] != nil {
			continue
		}
		j.tokens += c.cfg.EstimateTokens(t)
	}
	return j, nil
}

// textBytes is the bytes of a job's texts.
func textBytes(j *schema.Job) int {
	n := 0
	for _, t := range j.Texts {
		n += len(t)
	}
	return n
}

// mayInteract reports whether tenant's queued jobs may run as
// interactive ([Config.InteractiveTenants]); the first job of a tenant
// that may not is logged.
func (c *Loop) mayInteract(tenant string) bool {
	if c.cfg.InteractiveTenants == nil || slices.Contains(c.cfg.InteractiveTenants, tenant) {
		return true
	}
	c.warnedMu.Lock()
	defer c.warnedMu.Unlock()
	if c.warnedBulk == nil {
		c.warnedBulk = map[string]bool{}
	}
	// Tenants are the server's users: few; the map stays bounded anyway.
	if !c.warnedBulk[tenant] && len(c.warnedBulk) < 1024 {
		c.warnedBulk[tenant] = true
		c.cfg.Logger.Warn("a tenant's queued jobs ask for priority interactive, which --interactive-tenants does not allow it: they run as bulk (logged once a tenant)", "tenant", tenant)
	}
	return false
}

// given is a deadline the job names: the zero time
// (0001-01-01T00:00:00Z) is a deadline long past, not the job's "none".
func given(t time.Time) time.Time {
	if t.IsZero() {
		return t.Add(time.Nanosecond)
	}
	return t
}

// tenantOf returns the tenant of a delivery: a queued job's from the
// subject it was published on, a request's as its subject named it. Both
// come from the server, which lets a producer publish only under its own
// tenant; the body and the headers are never consulted.
func (c *Loop) tenantOf(j *job) (string, *schema.Error) {
	t := c.cfg.Replies.Tenancy
	if r := j.req; r != nil {
		if t.Off {
			return "", nil
		}
		if r.Tenant != "" && !schema.ValidTenant(r.Tenant) {
			return "", schema.Errorf(schema.CodeBadReply, "request subject names no valid tenant")
		}
		return r.Tenant, nil
	}
	tenant, ok := t.JobTenant(j.a.Subject)
	if !ok {
		return "", schema.Errorf(schema.CodeBadReply, "job subject %s has no tenant at token %d", quoteSubject(j.a.Subject), t.WithDefaults().Token)
	}
	return tenant, nil
}

// quoteSubject quotes at most the first 64 bytes of a subject.
func quoteSubject(s string) string {
	if len(s) > 64 {
		return strconv.Quote(strings.ToValidUTF8(s[:64], "")) + "..."
	}
	return strconv.Quote(s)
}

// replyOf resolves where a job's result goes: the job's reply field, the
// Embed-Reply header, then the request's own inbox; and checks it against
// the reply policy for the job's tenant. A request-reply delivery (Respond
// set) is answered through Respond, to its own inbox, since its caller
// waits: that inbox must be in the requester's space too (a refused one
// gets no answer at all), and the reply returned is "". A refused reply
// returns "" and the bad_reply error.
func (c *Loop) replyOf(j *job) (string, *schema.Error) {
	reply := j.inbox
	if j.req == nil {
		if j.wire != nil && j.wire.Reply != "" {
			reply = j.wire.Reply
		} else if h := header(j.a.Header, schema.HeaderReply); h != "" {
			reply = h
		}
	}
	switch {
	case reply == "":
		return "", nil
	case j.req != nil:
		return "", c.cfg.Replies.Check(j.tenant, reply)
	}
	if err := c.cfg.Replies.Check(j.tenant, reply); err != nil {
		return "", err
	}
	return reply, nil
}

// heartbeat sends InProgress when the message has waited every since its
// delivery or its last InProgress, unless it was settled meanwhile.
func (j *job) heartbeat(now time.Time, every time.Duration) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.settled || j.msg == nil || now.Sub(j.lastTouch) < every {
		return false
	}
	j.lastTouch = now
	return j.msg.InProgress() == nil
}

// resultMsgID is the Nats-Msg-Id and blob name of the job's result:
// [schema.ResultMsgID] of its reply and id, with, for a replayed job
// ([schema.HeaderReplay]), a hash of the replay's id appended, so the
// results stream keeps the replay's result beside the one the first run
// stored (within the duplicate window it would be dropped).
func (j *job) resultMsgID() string {
	id := schema.ResultMsgID(j.tenant, j.replySubject(), j.id)
	if r := header(j.a.Header, schema.HeaderReplay); r != "" && id != "" {
		sum := sha256.Sum256([]byte(r))
		id += "-" + hex.EncodeToString(sum[:8])
	}
	return id
}

// replySubject is where the job's result goes: the resolved reply, or a
// request's own inbox.
func (j *job) replySubject() string {
	if j.req != nil {
		return j.inbox
	}
	return j.reply
}
