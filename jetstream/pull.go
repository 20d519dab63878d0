package jetstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/consumer"
)

// Sink takes the deliveries of the fetch loop; *consumer.Loop is one.
// Submit blocks while the sink's in-flight budget is full, which is how the
// loop stops pulling: it does not ask for more than it has handed over.
type Sink interface {
	Submit(ctx context.Context, d consumer.Delivery) error
}

// statser is the optional ability of a [Sink] to say how much it has done;
// the fetch loop sizes its prefetch from it.
type statser interface {
	Stats() consumer.Stats
}

// PullLoop is a running fetch loop started by [Pull]. Like nats.go's
// ConsumeContext it is stopped with [PullLoop.Stop] or [PullLoop.Drain] and
// reports the end through [PullLoop.Done].
//
// Two goroutines share the prefetch buffer: the fetcher issues one pull
// request at a time and appends what it brings; the submitter hands the
// buffer's head to the sink. Buffered messages are kept alive (InProgress)
// by the sink when it can ([consumer.Loop.Keep]: one heartbeat owner),
// else by a heartbeater of the loop's own, so that none waits here
// unattended past half of AckWait.
type PullLoop struct {
	cons   natsjs.Consumer
	sink   Sink
	o      pullOptions
	cancel context.CancelFunc // cancels the Submit in progress (Stop)
	done   chan struct{}
	timing nakTiming

	fetchCtx    context.Context // ends the fetching (Stop, Drain)
	stopFetch   context.CancelFunc
	more, room  chan struct{} // the buffer grew / shrank (capacity 1)
	fetcherDone chan struct{}

	mu       sync.Mutex
	buf      []*buffered // pulled, not yet handed to the sink, oldest first
	bufBytes int
	size     int  // prefetch target, in messages
	reqBytes int  // byte cap of the buffer and what is asked for
	est      int  // estimated bytes of a job: the largest recent one
	minEst   int  // floor of est
	nak      bool // Stop: give buffered messages back instead of submitting

	rate rateMeter
	// keep, when the sink keeps messages alive ([consumer.Loop.Keep]),
	// hands it the buffered messages: one heartbeat owner per process.
	keep func(m consumer.Message, since time.Time) (release func() time.Time)
}

// keeper is the optional ability of a [Sink] to keep the messages the
// loop buffered alive (InProgress) until they are submitted.
type keeper interface {
	Keep(m consumer.Message, since time.Time) (release func() time.Time)
}

// Pull starts the fetch loop of the durable pull consumer cons: it pulls
// with one pull request at a time (nats.go's Fetch) and hands every message
// to sink as a [consumer.Delivery]. The loop runs until ctx ends, the
// handle is stopped, or the connection closes for good; every other error
// (a reconnect, a lost pull request, a consumer briefly gone) ends only
// the pull request, and the loop issues a new one.
//
// Flow control: a pull request asks for at most the room left in the
// prefetch buffer, in messages and in bytes ([PrefetchBytes], at the
// estimated job size; see wantMore); the next
// request is issued only after the last one ended at the server (its batch
// filled, or it expired), so no request of this loop can take a message
// for an inbox that nobody reads. Buffered messages are not yet held by
// the consumer, so they are handed to the sink's keeping (or the loop
// itself sends InProgress for any that waited a quarter of AckWait). The prefetch starts at [PrefetchLimits]' minimum and
// follows the measured throughput: the target is jobs/s x AckWait/4,
// measured over intervals in which the sink was busy, clamped to the
// limits, so a member does not hoard jobs its peers could start.
func Pull(ctx context.Context, cons natsjs.Consumer, sink Sink, opts ...PullOption) (*PullLoop, error) {
	o := defaultPullOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if o.min < 1 || o.max < o.min {
		return nil, fmt.Errorf("pull: prefetch limits %d..%d: want 1 <= min <= max", o.min, o.max)
	}
	if o.expires < 2*o.heartbeat || o.heartbeat <= 0 {
		return nil, fmt.Errorf("pull: pull request expiry %v must be at least twice its heartbeat %v", o.expires, o.heartbeat)
	}
	var timing nakTiming
	if info := cons.CachedInfo(); info != nil {
		timing = nakTiming{ackWait: info.Config.AckWait, backoff: info.Config.BackOff, nc: o.nc}
	}
	if o.ackWait <= 0 {
		o.ackWait = timing.ackWait
	}
	if o.ackWait <= 0 {
		o.ackWait = DefaultConfig().Consumer.AckWait
	}
	ctx, cancel := context.WithCancel(ctx)
	fetchCtx, stopFetch := context.WithCancel(ctx)
	p := &PullLoop{
		cons: cons, sink: sink, o: o, cancel: cancel, done: make(chan struct{}), timing: timing,
		fetchCtx: fetchCtx, stopFetch: stopFetch,
		more: make(chan struct{}, 1), room: make(chan struct{}, 1), fetcherDone: make(chan struct{}),
		size: o.min, reqBytes: o.requestBytes(), minEst: o.minJobEstimate(),
	}
	p.est = p.minEst
	st, _ := p.stats()
	p.rate.start(o.now(), st)
	go p.fetcher()
	if k, ok := sink.(keeper); ok {
		p.keep = k.Keep
	} else {
		go p.heartbeater(ctx)
	}
	go p.submitter(ctx)
	context.AfterFunc(ctx, p.Stop)
	return p, nil
}

// hasMore reports whether the loop holds a message after the one it is
// handing to the sink (false once stopped: the rest is NAKed).
func (p *PullLoop) hasMore() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.nak && len(p.buf) > 1
}

// Prefetch is the current prefetch size in messages.
func (p *PullLoop) Prefetch() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.size
}

// Stop stops pulling at once. Messages already buffered are NAKed without
// delay, so another member of the fleet takes them now rather than after
// AckWait; a Submit blocked on a full consumer is abandoned (the consumer
// NAKs that delivery). Deliveries already handed over are the consumer's:
// drain it next.
//
// The pull request in progress is abandoned: its inbox goes, so the server
// drops it; a message the server sends it in that instant comes back after
// AckWait (delivery is at least once).
func (p *PullLoop) Stop() {
	p.mu.Lock()
	p.nak = true
	p.mu.Unlock()
	p.stopFetch()
	p.cancel()
	signal(p.more)
}

// Drain stops pulling and hands the messages already buffered to the sink
// before the loop ends.
func (p *PullLoop) Drain() {
	p.stopFetch()
	signal(p.more)
}

// Done is closed when the loop has ended and every message it pulled was
// handed to the sink or NAKed.
func (p *PullLoop) Done() <-chan struct{} { return p.done }

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// fetcher issues the pull requests, one at a time, while fetching is on.
func (p *PullLoop) fetcher() {
	defer close(p.fetcherDone)
	defer signal(p.more)
	var retry backoff
	for {
		n, ok := p.wantMore()
		if !ok {
			select {
			case <-p.room:
				continue
			case <-p.fetchCtx.Done():
				return
			}
		}
		if p.fetchCtx.Err() != nil {
			return
		}
		// A tenant over its quota: its jobs wait in the stream, not here.
		if d := p.o.holdFor(); d > 0 {
			select {
			case <-time.After(d):
			case <-p.fetchCtx.Done():
				return
			}
			continue
		}
		if p.o.onRequest != nil {
			p.o.onRequest()
		}
		err := p.fetchOnce(n)
		switch {
		case p.fetchCtx.Err() != nil:
			return
		case errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, natsjs.ErrConnectionClosed) || p.o.nc != nil && p.o.nc.IsClosed():
			p.o.logger.Warn("pull loop ended: nats connection closed")
			return
		case err != nil && !errors.Is(err, natsjs.ErrNoHeartbeat):
			d := retry.next()
			p.o.logger.Warn("pull request failed; pulling again", "err", err, "in", d)
			select {
			case <-time.After(d):
			case <-p.fetchCtx.Done():
				return
			}
			continue
		case err != nil:
			p.o.logger.Debug("pull request lost (no heartbeat); pulling again")
		}
		retry = backoff{}
	}
}

// wantMore says whether to pull now and how many messages to ask for:
// the room left in the buffer, once at least half of it is free (or it is
// empty), and no more than the byte room holds at the estimated job size.
//
// A request carries no byte limit of its own (nats.go's FetchMaxBytes):
// on a clustered consumer the server sends the 409 that ends a
// byte-limited request before the deliveries it is still replicating,
// nats.go's Fetch stops reading at the 409, and those jobs would wait out
// AckWait. A request that asks for a number of messages ends when the
// client has counted them, or by a 408 the server sends only after its
// replicated deliveries.
func (p *PullLoop) wantMore() (n int, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n = p.size - len(p.buf)
	room := p.reqBytes - p.bufBytes
	if len(p.buf) > 0 && (2*n < p.size || 2*room < p.reqBytes) {
		return 0, false
	}
	return max(min(n, room/p.est), 1), true
}

// fetchOnce runs one pull request to its end and buffers what it brings.
// The end is the server's: its 408 when the request expires, or the last
// message asked for. A deadline of the client's own (nats.go's
// FetchContext asks the server for 90% of it, at most a second less) is
// shorter than the request's life at the server whenever the request was
// delayed on its way by more than that margin, and a job the server sent
// to it after the client left came back only after AckWait.
//
// A reconnect of the connection, its close or the loop stopping abandons
// the request at once (the server it was parked on may be gone): nats.go
// unsubscribes its inbox, so the server drops the request rather than
// deliver to it, and what it brought before is buffered like the rest
// (submitted, or NAKed after Stop). Keeping the inbox to NAK what came
// made the request a trap: a job NAKed went back to the same request,
// still parked at the server, until MaxDeliver ended it unhandled.
func (p *PullLoop) fetchOnce(n int) error {
	ctx, cancel := context.WithCancel(p.fetchCtx)
	defer cancel()
	if p.o.nc != nil {
		status := p.o.nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
		defer p.o.nc.RemoveStatusListener(status)
		if p.o.nc.IsClosed() {
			return nats.ErrConnectionClosed
		}
		go func() {
			select {
			case <-status:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	fctx := serverEnd{ctx, fetchDeadline(time.Now(), p.o.expires)}
	mb, err := p.cons.Fetch(n, natsjs.FetchContext(fctx), natsjs.FetchHeartbeat(p.o.heartbeat))
	if err != nil {
		return err
	}
	for m := range mb.Messages() {
		b := &buffered{m: m, size: msgSize(m), touched: p.o.now()}
		if p.keep != nil {
			b.release = p.keep(m, b.touched)
		}
		p.mu.Lock()
		p.buf = append(p.buf, b)
		p.bufBytes += b.size
		// The estimate follows the largest recent job, and decays.
		p.est = max(b.size, p.est-p.est/64, p.minEst)
		p.mu.Unlock()
		signal(p.more)
	}
	err = mb.Error()
	if errors.Is(err, context.Canceled) || errors.Is(err, natsjs.ErrBatchCompleted) || errors.Is(err, natsjs.ErrMaxBytesExceeded) {
		return nil
	}
	return err
}

// submitter hands the buffered messages to the sink in order; after Stop
// it NAKs them instead. It ends when fetching has ended and the buffer is
// empty.
func (p *PullLoop) submitter(ctx context.Context) {
	defer close(p.done)
	defer p.cancel()
	for {
		p.mu.Lock()
		var head *buffered
		if len(p.buf) > 0 {
			head = p.buf[0]
		}
		nak := p.nak
		p.mu.Unlock()
		if head == nil {
			select {
			case <-p.more:
				continue
			case <-p.fetcherDone:
				p.mu.Lock()
				empty := len(p.buf) == 0
				p.mu.Unlock()
				if empty {
					return
				}
				continue
			}
		}
		if head.release != nil {
			t := head.release()
			p.mu.Lock()
			head.touched = t
			p.mu.Unlock()
		}
		if nak {
			if err := head.m.Nak(); err != nil {
				p.o.logger.Debug("nak of a buffered message failed", "err", err)
			}
		} else {
			p.mu.Lock()
			touched := head.touched
			p.mu.Unlock()
			// The consumer owns the delivery from here, whatever Submit
			// says: a refused one is already NAKed.
			_ = p.sink.Submit(ctx, jsDelivery(head.m, touched, p.timing))
		}
		p.mu.Lock()
		p.buf[0] = nil
		p.buf = p.buf[1:]
		p.bufBytes -= head.size
		p.mu.Unlock()
		signal(p.room)
		if !nak {
			p.adapt()
		}
	}
}

func (p *PullLoop) stats() (consumer.Stats, bool) {
	if s, ok := p.sink.(statser); ok {
		return s.Stats(), true
	}
	return consumer.Stats{}, false
}

// adapt measures the sink's throughput and moves the prefetch target.
func (p *PullLoop) adapt() {
	st, ok := p.stats()
	if !ok {
		return
	}
	jobsPerSec, textsPerSec, measured := p.rate.observe(p.o.now(), st, p.o.every)
	if !measured {
		return
	}
	target := int(jobsPerSec * (p.o.ackWait / 4).Seconds())
	target = min(max(target, p.o.min), p.o.max)
	p.mu.Lock()
	defer p.mu.Unlock()
	if target < 2*p.size && 2*target > p.size {
		return
	}
	p.o.logger.Info("prefetch follows throughput", "jobs_per_s", round1(jobsPerSec), "texts_per_s", round1(textsPerSec), "from", p.size, "to", target)
	p.size = target
}

// serverEnd is the context a pull request is fetched with: it ends only
// when the embedded one does (the request abandoned), and its deadline is
// the one at which nats.go's FetchContext, which asks the server for 90%
// of the time left and at most a second less, asks for the loop's expiry
// (fetchDeadline). The request thus ends at the server's 408, not at a
// deadline of the client's; and abandoning it makes nats.go unsubscribe
// its inbox, which FetchMaxWait gives no way to do.
type serverEnd struct {
	context.Context
	at time.Time
}

func (c serverEnd) Deadline() (time.Time, bool) { return c.at, true }

// fetchDeadline is the deadline FetchContext turns, at now, into a request
// expiring after expires (a few milliseconds more: the time FetchContext
// reads the clock later, so that it never asks for less, which could fall
// below twice the heartbeat, the least nats.go accepts).
func fetchDeadline(now time.Time, expires time.Duration) time.Time {
	return now.Add(expires + min(expires/9, time.Second) + 10*time.Millisecond)
}
