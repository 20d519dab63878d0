package jetstream

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// Every request of every endpoint of the service leaves its subscription
// at once: the handler nats.go runs on the subscription's goroutine only
// reads the tenant from the subject, checks the reply against the reply
// policy and queues the request under its tenant (or refuses it there,
// cheaply, when the tenant's queue is full). Workers take the queued
// requests round-robin by tenant and run the endpoint. So one tenant's
// flood costs the subscription a few microseconds a request, never
// overflows its pending limits (nats.go would drop every tenant's requests
// alike), and waits behind no other tenant's: the others' requests are
// taken in turn with its own.

// Bounds of the queues of requests not yet handed to an endpoint.
const (
	// DefaultTenantQueue is how many requests of one tenant may wait;
	// more are answered overloaded at once.
	DefaultTenantQueue = 1024
	// DefaultTenantQueueBytes bounds the bytes of one tenant's waiting
	// requests.
	DefaultTenantQueueBytes = 32 << 20
	// DefaultQueueBytes bounds the bytes of every tenant's waiting
	// requests together.
	DefaultQueueBytes = 256 << 20
	// DefaultServicePendingMsgs and DefaultServicePendingBytes are the
	// pending limits of each endpoint's subscription (nats.go's defaults
	// are 500k messages and 64 MiB): room for a burst while the handler
	// queues; what is over them is dropped by nats.go and counted.
	DefaultServicePendingMsgs  = 1 << 18
	DefaultServicePendingBytes = 128 << 20
)

// requestOverhead is what a queued request is counted beyond its body.
const requestOverhead = 512

// ServiceMetrics is what the service records of the requests it settles
// without the job loop. *telemetry.Metrics satisfies it; a [LoopMetrics]
// that does is used for the service too.
type ServiceMetrics interface {
	// RequestsDropped counts n requests that got no answer at all, by
	// reason: [DropSlowConsumer], [DropNoReply], [DropRefusedReply],
	// [DropAnswerFailed].
	RequestsDropped(ctx context.Context, reason string, n int)
	// RequestsShed counts n requests answered at the door without
	// reaching their endpoint, by reason: [ShedQueueFull], [ShedStopping].
	RequestsShed(ctx context.Context, reason string, n int)
}

// Reasons of [ServiceMetrics].
const (
	// DropSlowConsumer: nats.go dropped them over an endpoint
	// subscription's pending limits.
	DropSlowConsumer = "slow_consumer"
	// DropNoReply: a request without a reply subject (nothing to answer).
	DropNoReply = "no_reply"
	// DropRefusedReply: a reply outside the requester's space on a full
	// queue (else such a request is dead-lettered bad_reply by the job
	// loop).
	DropRefusedReply = "refused_reply"
	// DropAnswerFailed: the answer's publish failed.
	DropAnswerFailed = "answer_failed"
	// ShedQueueFull: the tenant's queue (or all of them) was full.
	ShedQueueFull = "queue_full"
	// ShedStopping: the service stopped before the request was handled.
	ShedStopping = "stopping"
)

type nopServiceMetrics struct{}

func (nopServiceMetrics) RequestsDropped(context.Context, string, int) {}
func (nopServiceMetrics) RequestsShed(context.Context, string, int)    {}

// queued is one request waiting for a worker.
type queued struct {
	req      micro.Request
	ep       *endpoint
	tenant   string
	received time.Time
	size     int64
	// refused is set when the reply may not be answered: the worker hands
	// the request to the job loop as bad_reply (no answer, dead letter).
	refused bool
}

// tenantQueue is one tenant's waiting requests, oldest first.
type tenantQueue struct {
	items []queued
	bytes int64
}

// inbound holds the waiting requests of every tenant and hands them out
// round-robin by tenant.
type inbound struct {
	perTenant      int
	perTenantBytes int64
	maxBytes       int64

	mu     sync.Mutex
	cond   *sync.Cond
	queues map[string]*tenantQueue
	ring   []string // tenants with waiting requests, in turn order
	next   int      // index in ring of the tenant served next
	bytes  int64
	closed bool
}

func newInbound(perTenant int, perTenantBytes, maxBytes int64) *inbound {
	q := &inbound{perTenant: perTenant, perTenantBytes: perTenantBytes, maxBytes: maxBytes, queues: map[string]*tenantQueue{}}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// errQueueFull and errStopping are why put refused a request.
var (
	errQueueFull = errors.New("request queue full")
	errStopping  = errors.New("service stopping")
)

// put queues it, or says why not.
func (q *inbound) put(it queued) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return errStopping
	}
	tq := q.queues[it.tenant]
	if tq == nil {
		if q.bytes+it.size > q.maxBytes {
			return errQueueFull
		}
		tq = &tenantQueue{}
		q.queues[it.tenant] = tq
		// A tenant with nothing waiting joins the turn just before the one
		// served next: it waits for no round of the tenants already there.
		q.ring = append(q.ring, "")
		copy(q.ring[q.next+1:], q.ring[q.next:])
		q.ring[q.next] = it.tenant
	}
	// One tenant's first request always fits its own share, so a tenant
	// is never locked out by request size alone.
	if len(tq.items) > 0 && (len(tq.items) >= q.perTenant || tq.bytes+it.size > q.perTenantBytes || q.bytes+it.size > q.maxBytes) {
		return errQueueFull
	}
	tq.items = append(tq.items, it)
	tq.bytes += it.size
	q.bytes += it.size
	q.cond.Signal()
	return nil
}

// take waits for the next request in turn; false once closed.
func (q *inbound) take() (queued, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.ring) == 0 && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return queued{}, false
	}
	if q.next >= len(q.ring) {
		q.next = 0
	}
	tenant := q.ring[q.next]
	tq := q.queues[tenant]
	it := tq.items[0]
	tq.items[0] = queued{}
	tq.items = tq.items[1:]
	tq.bytes -= it.size
	q.bytes -= it.size
	if len(tq.items) == 0 {
		delete(q.queues, tenant)
		q.ring = append(q.ring[:q.next], q.ring[q.next+1:]...)
	} else {
		q.next++
	}
	return it, true
}

// close stops handing out requests and returns those still waiting.
func (q *inbound) close() []queued {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil
	}
	q.closed = true
	var left []queued
	for _, t := range q.ring {
		left = append(left, q.queues[t].items...)
	}
	q.queues, q.ring, q.bytes = nil, nil, 0
	q.cond.Broadcast()
	return left
}

// slowSubs counts what nats.go drops over the pending limits of the
// service's subscriptions. nats.go reports a slow consumer once a spell
// (to the connection's error handler, with the subscription); the
// subscription's Dropped count says how many, and is read again until
// the spell is over.
type slowSubs struct {
	stopped atomic.Bool
	mu      sync.Mutex
	subs    map[*nats.Subscription]int // dropped count already recorded
	owned   func(subject string) bool
	kick    chan struct{}
	metrics ServiceMetrics
	log     *slog.Logger
}

// watchSlow installs, in front of nc's error handler, the counting of the
// drops of the subscriptions owned says are the service's.
func watchSlow(nc *nats.Conn, owned func(string) bool, m ServiceMetrics, log *slog.Logger) *slowSubs {
	s := &slowSubs{subs: map[*nats.Subscription]int{}, owned: owned, kick: make(chan struct{}, 1), metrics: m, log: log}
	next := nc.Opts.AsyncErrorCB
	nc.SetErrorHandler(func(c *nats.Conn, sub *nats.Subscription, err error) {
		if sub != nil && errors.Is(err, nats.ErrSlowConsumer) && !s.stopped.Load() && s.owned(sub.Subject) {
			s.mu.Lock()
			if _, ok := s.subs[sub]; !ok {
				s.subs[sub] = 0
			}
			s.mu.Unlock()
			select {
			case s.kick <- struct{}{}:
			default:
			}
		}
		if next != nil {
			next(c, sub, err)
		}
	})
	return s
}

// run records drops until ctx ends, then once more.
func (s *slowSubs) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.record(context.WithoutCancel(ctx))
			s.stopped.Store(true)
			return
		case <-s.kick:
		case <-t.C:
		}
		s.record(ctx)
	}
}

func (s *slowSubs) record(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sub, seen := range s.subs {
		n, err := sub.Dropped()
		if err != nil {
			delete(s.subs, sub) // unsubscribed
			continue
		}
		if n > seen {
			s.subs[sub] = n
			s.metrics.RequestsDropped(ctx, DropSlowConsumer, n-seen)
			s.log.Warn("requests dropped unanswered: the service's subscription is over its pending limits (slow consumer)",
				"subject", sub.Subject, "dropped", n-seen, "dropped_total", n)
		}
	}
}

// rateLog logs a line at most once a second, with how many it skipped.
type rateLog struct {
	last    atomic.Int64
	skipped atomic.Int64
}

func (r *rateLog) warn(log *slog.Logger, msg string, args ...any) {
	now := time.Now().UnixNano()
	last := r.last.Load()
	if now-last < int64(time.Second) || !r.last.CompareAndSwap(last, now) {
		r.skipped.Add(1)
		return
	}
	log.Warn(msg, append(args, "unlogged", r.skipped.Swap(0))...)
}
