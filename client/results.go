package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetembed/jetembed/schema"
)

// StoredResult is one result read back from the results stream (a blob
// reference already resolved to the whole result).
type StoredResult struct {
	*schema.Result
	// Subject is the subject it was published on.
	Subject string
	// Sequence is its stream sequence; Pending counts the results of the
	// run stored after it when it was delivered.
	Sequence, Pending uint64
}

// Results yields the results of run stored in the results stream, oldest
// first, and then waits for new ones until ctx ends (or, with
// [UntilCaughtUp], stops when it has read what was stored). A result that
// does not decode, or that was delivered from outside the run's subjects,
// is yielded with an error wrapping [ErrBadResult] and the iteration goes
// on; a message the fleet did not write as the result of its subject's
// job is yielded with [ErrForeignResult] alone (no Result) and the
// iteration goes on; an error that ends it (ctx, the stream) is yielded
// last.
//
// It reads through an ephemeral push consumer filtered on the run's
// results (embed.results.<tenant>.<run>.>, or embed.results.<run>.>
// without a tenant) that delivers to the connection's inbox, with flow
// control, and is created again from the last result read after a gap or
// a lost consumer. A push consumer needs no pull grant: a tenant is granted
// creating consumers filtered on its own results, and nothing that could
// read another's (see deploy/nats/accounts.conf).
func (c *Client) Results(ctx context.Context, run string, opts ...ResultsOption) iter.Seq2[StoredResult, error] {
	var o resultsOptions
	for _, opt := range opts {
		opt(&o)
	}
	prefix := c.resultsRoot() + "." + Token(run) + "."
	return func(yield func(StoredResult, error) bool) {
		r := &pushReader{c: c, filter: prefix + ">", next: o.after + 1}
		defer r.stop()
		pending, err := r.open(ctx)
		if err != nil {
			yield(StoredResult{}, fmt.Errorf("results of run %s: %w", run, err))
			return
		}
		if o.untilCaughtUp && pending == 0 {
			return
		}
		for {
			m, err := r.read(ctx)
			if err != nil {
				yield(StoredResult{}, fmt.Errorf("results of run %s: %w", run, err))
				return
			}
			sr, err := c.storedResult(ctx, m, prefix)
			if !yield(sr, err) {
				return
			}
			if o.untilCaughtUp && sr.Pending == 0 {
				return
			}
		}
	}
}

// storedResult decodes one delivered result of the run whose subjects
// start with prefix.
func (c *Client) storedResult(ctx context.Context, m natsjs.Msg, prefix string) (StoredResult, error) {
	sr := StoredResult{Subject: m.Subject()}
	if md, err := m.Metadata(); err == nil {
		sr.Sequence, sr.Pending = md.Sequence.Stream, md.NumPending
	}
	// A consumer re-pointed by someone else at other subjects must not
	// pass their results off as the run's.
	if !strings.HasPrefix(sr.Subject, prefix) {
		return sr, fmt.Errorf("%w: %s (seq %d) is not a result of this run", ErrBadResult, sr.Subject, sr.Sequence)
	}
	enc := schema.EncodingFor(m.Headers().Get(schema.HeaderContentType))
	res, err := schema.DecodeResult(m.Data(), enc)
	if err != nil {
		err = fmt.Errorf("%w: %s (seq %d): %w", ErrBadResult, sr.Subject, sr.Sequence, err)
	}
	// Only the embedder writes a result with the identity of its tenant,
	// subject and job id; anything else that reached the subject (an
	// answer relayed there, a message of someone else's) is no job's
	// result, whatever its body says.
	id := ""
	if res != nil {
		id = res.ID
	} else {
		// A body that does not decode names no id: the subject does
		// ([Client.ReplySubject]).
		id = idOfToken(sr.Subject[strings.LastIndexByte(sr.Subject, '.')+1:])
	}
	if !c.fleetWrote(m.Headers().Get(schema.HeaderMsgID), sr.Subject, id) {
		return StoredResult{Subject: sr.Subject, Sequence: sr.Sequence, Pending: sr.Pending},
			fmt.Errorf("%w: %s (seq %d) does not carry the identity of a result of job %q", ErrForeignResult, sr.Subject, sr.Sequence, id)
	}
	if err == nil && res.Blob != nil {
		res, err = c.resolve(ctx, res, enc)
	}
	sr.Result = res
	return sr, err
}

// fleetWrote reports whether msgID is the Nats-Msg-Id the embedder gives
// the result of job id stored on subject: [schema.ResultMsgID] of its
// tenant, the subject and the id, with the suffix of a replay
// ("-" and 16 hex digits) or none. The tenant is the client's; without
// one, the fleet read it from the job's subject (the token after the jobs
// prefix, the same as after the results prefix here); with tenancy off
// it is none.
func (c *Client) fleetWrote(msgID, subject, id string) bool {
	if msgID == "" || id == "" {
		return false
	}
	tenants := []string{""}
	if c.o.tenant != "" {
		tenants = append(tenants, c.o.tenant)
	} else if rest, ok := strings.CutPrefix(subject, c.o.resultsPrefix+"."); ok {
		if tok, _, _ := strings.Cut(rest, "."); tok != "" {
			tenants = append(tenants, tok)
		}
	}
	for _, tenant := range tenants {
		want := schema.ResultMsgID(tenant, subject, id)
		if msgID == want {
			return true
		}
		if suffix, ok := strings.CutPrefix(msgID, want+"-"); ok && replaySuffix(suffix) {
			return true
		}
	}
	return false
}

// replaySuffix reports whether s is the suffix a replayed job's result
// id carries: 16 lowercase hex digits.
func replaySuffix(s string) bool {
	if len(s) != 16 {
		return false
	}
	for i := range len(s) {
		if !('0' <= s[i] && s[i] <= '9' || 'a' <= s[i] && s[i] <= 'f') {
			return false
		}
	}
	return true
}

// deliverSubject is where a results consumer of the client delivers: with
// a tenant, embed.deliver.<tenant>.<unique> ([schema.SubjectDeliver]): the
// consumer lives in the account of the streams, and when tenants are
// accounts of their own that space is what the fleet's account exports
// to the tenant (its inbox is in its own account); without one, the
// connection's inbox.
func (c *Client) deliverSubject() string {
	if c.o.tenant == "" {
		return c.nc.NewInbox()
	}
	return schema.SubjectDeliver + "." + c.o.tenant + "." + nuid.Next()
}

// resultsHeartbeat is the push consumer's idle heartbeat: two missed ones
// and it is created again.
const resultsHeartbeat = 2 * time.Second

// pushReader reads a filtered part of the results stream in order through
// an ephemeral push consumer, recreating it from the next stream sequence
// when a delivery is missing, heartbeats stop or the consumer is gone.
type pushReader struct {
	c      *Client
	filter string
	name   string // the tenant's consumer name in use, "" for none
	next   uint64 // stream sequence to start a new consumer at
	seen   uint64 // consumer sequence of the last delivery read

	// One generation per consumer: what an old consumer still delivers
	// after it was replaced never reaches the new one's queue.
	cc    natsjs.ConsumeContext
	msgs  chan natsjs.Msg
	reset chan struct{}
	gone  chan struct{} // closed when the generation is replaced or stopped
}

// open creates the consumer and starts consuming; it returns the number
// of results stored from next on.
func (r *pushReader) open(ctx context.Context) (uint64, error) {
	pc, err := r.create(ctx)
	if err != nil {
		return 0, err
	}
	return r.consume(pc)
}

// create creates the push consumer from next on: with a tenant, under
// the first of the tenant's results consumer names
// ([schema.ResultsConsumerName]) not in use, the only names the server
// lets it create; without one, under a unique name.
func (r *pushReader) create(ctx context.Context) (natsjs.PushConsumer, error) {
	cfg := r.config(nuid.Next())
	if r.c.o.tenant == "" {
		return r.c.js.CreatePushConsumer(ctx, r.c.o.resultsStream, cfg)
	}
	for k := range r.c.o.resultsConsumers {
		cfg.Name = schema.ResultsConsumerName(r.c.o.tenant, k)
		pc, err := r.c.js.CreatePushConsumer(ctx, r.c.o.resultsStream, cfg)
		switch {
		case err == nil:
			r.name = cfg.Name
			return pc, nil
		case errors.Is(err, natsjs.ErrConsumerExists), errors.Is(err, natsjs.ErrConsumerNameAlreadyInUse):
			continue
		case errors.Is(err, nats.ErrNoResponders):
			// Tenants as accounts: a name past the tenant's cap is not
			// imported, and nobody answers it.
			return nil, fmt.Errorf("%w: %s (the %d before it are in use; a reader that stopped without deleting its consumer holds its name for a minute)", ErrResultsConsumers, cfg.Name, k)
		default:
			return nil, err
		}
	}
	return nil, fmt.Errorf("%w: all %d (%s...) are in use", ErrResultsConsumers, r.c.o.resultsConsumers, schema.ResultsConsumerName(r.c.o.tenant, 0))
}

// config is the results consumer named name.
func (r *pushReader) config(name string) natsjs.ConsumerConfig {
	cfg := natsjs.ConsumerConfig{
		Name:              name,
		FilterSubject:     r.filter,
		DeliverSubject:    r.c.deliverSubject(),
		DeliverPolicy:     natsjs.DeliverAllPolicy,
		AckPolicy:         natsjs.AckNonePolicy,
		FlowControl:       true,
		IdleHeartbeat:     resultsHeartbeat,
		InactiveThreshold: time.Minute,
		MemoryStorage:     true,
		Replicas:          1,
	}
	if r.next > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = natsjs.DeliverByStartSequencePolicy, r.next
	}
	return cfg
}

// consume starts consuming pc.
func (r *pushReader) consume(pc natsjs.PushConsumer) (uint64, error) {
	msgs, reset, gone := make(chan natsjs.Msg, 64), make(chan struct{}, 1), make(chan struct{})
	// deliver runs on the subscription's goroutine: blocking it holds back
	// the flow control answer, so the server waits for the reader.
	deliver := func(m natsjs.Msg) {
		select {
		case msgs <- m:
		case <-gone:
		}
	}
	cc, err := pc.Consume(deliver, natsjs.ConsumeErrHandler(func(_ natsjs.ConsumeContext, err error) {
		if errors.Is(err, natsjs.ErrNoHeartbeat) || errors.Is(err, natsjs.ErrConsumerDeleted) {
			select {
			case reset <- struct{}{}:
			default:
			}
		}
	}))
	if err != nil {
		close(gone)
		r.remove()
		return 0, err
	}
	r.cc, r.msgs, r.reset, r.gone, r.seen = cc, msgs, reset, gone, 0
	return pc.CachedInfo().NumPending, nil
}

// read returns the next delivery in order.
func (r *pushReader) read(ctx context.Context) (natsjs.Msg, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-r.reset:
			if err := r.reopen(ctx); err != nil {
				return nil, err
			}
		case m := <-r.msgs:
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			if md.Sequence.Consumer != r.seen+1 {
				// A delivery went missing (a slow reader, a reconnect):
				// start again after the last one read.
				if err := r.reopen(ctx); err != nil {
					return nil, err
				}
				continue
			}
			r.seen, r.next = md.Sequence.Consumer, md.Sequence.Stream+1
			return m, nil
		}
	}
}

// reopen replaces the consumer, retrying while the server cannot be
// reached, until ctx ends.
func (r *pushReader) reopen(ctx context.Context) error {
	r.stop()
	delay := 100 * time.Millisecond
	for {
		_, err := r.open(ctx)
		if err == nil {
			return nil
		}
		var apiErr *natsjs.APIError
		if errors.As(err, &apiErr) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// stop ends the current generation, and deletes its consumer when it
// holds one of the tenant's names.
func (r *pushReader) stop() {
	if r.cc == nil {
		return
	}
	close(r.gone)
	r.cc.Stop()
	r.cc = nil
	r.remove()
}

// remove deletes the tenant's named consumer, so that its name is free at
// once; one left behind (a lost connection) goes after its inactive
// threshold.
func (r *pushReader) remove() {
	if r.name == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = r.c.js.DeleteConsumer(ctx, r.c.o.resultsStream, r.name)
	r.name = ""
}
