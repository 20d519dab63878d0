package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/consumer"
)

// Sink takes the deliveries of the fetch loop; *consumer.Consumer is one.
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
// reports the end through [PullLoop.Closed].
type PullLoop struct {
	cons   natsjs.Consumer
	sink   Sink
	o      pullOptions
	cancel context.CancelFunc // cancels the Submit in progress (Stop)
	done   chan struct{}

	mu       sync.Mutex
	it       natsjs.MessagesContext
	size     int  // prefetch of it, in messages
	resize   int  // the size to reopen with once it is drained, 0: none
	stopping bool // Stop or Drain was called: do not reopen
	nak      bool // Stop: give buffered messages back instead of submitting

	rate   rateMeter
	timing nakTiming
}

// Pull starts the fetch loop of the durable pull consumer cons: it pulls
// with nats.go's pre-buffering Messages iterator and hands every message
// to sink as a [consumer.Delivery]. The loop runs until ctx ends, the
// handle is stopped, or the connection closes.
//
// The prefetch (how many messages the server pushes ahead of Submit) starts
// at [PrefetchLimits]' minimum and follows the measured throughput: buffered
// messages are not yet held by the consumer, so nothing sends InProgress for
// them, and a buffer larger than what the process finishes within a quarter
// of the consumer's AckWait would see its tail redelivered elsewhere while
// it still waits here. The target is jobs/s x AckWait/4, measured over
// intervals in which the sink was busy (an idle sink says nothing about its
// speed), clamped to the limits; the iterator is drained and reopened when
// the target moves by a factor of two.
func Pull(ctx context.Context, cons natsjs.Consumer, sink Sink, opts ...PullOption) (*PullLoop, error) {
	o := defaultPullOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if o.min < 1 || o.max < o.min {
		return nil, fmt.Errorf("pull: prefetch limits %d..%d: want 1 <= min <= max", o.min, o.max)
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
	p := &PullLoop{cons: cons, sink: sink, o: o, cancel: cancel, done: make(chan struct{}), timing: timing}
	it, err := p.open(o.min)
	if err != nil {
		cancel()
		return nil, err
	}
	p.it, p.size = it, o.min
	st, _ := p.stats()
	p.rate.start(o.now(), st)
	go p.run(ctx)
	context.AfterFunc(ctx, p.Stop)
	return p, nil
}

func (p *PullLoop) open(size int) (natsjs.MessagesContext, error) {
	opt := natsjs.PullMessagesOpt(natsjs.PullMaxMessages(size))
	if p.o.maxBytes > 0 {
		opt = natsjs.PullMaxMessagesWithBytesLimit(size, p.o.maxBytes)
	}
	it, err := p.cons.Messages(opt)
	if err != nil {
		return nil, fmt.Errorf("pull: %w", err)
	}
	return it, nil
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
// The server may have routed a few more messages of the outstanding pull
// request when the iterator's inbox went away; they never arrive and come
// back after AckWait (delivery is at least once). nats.go's Messages has no
// way to wait for the pull request to finish; resizes, and the reopen after
// a long silence (see run), have the same window.
func (p *PullLoop) Stop() { p.stop(true) }

// Drain stops pulling and hands the messages already buffered to the sink
// before the loop ends.
func (p *PullLoop) Drain() { p.stop(false) }

func (p *PullLoop) stop(nak bool) {
	p.mu.Lock()
	if p.stopping {
		if nak && !p.nak {
			p.nak = true
			p.cancel()
		}
		p.mu.Unlock()
		return
	}
	p.stopping, p.nak = true, nak
	it := p.it
	p.mu.Unlock()
	if nak {
		p.cancel()
	}
	it.Drain()
}

// Closed is closed when the loop has ended and every message it pulled was
// handed to the sink or NAKed.
func (p *PullLoop) Closed() <-chan struct{} { return p.done }

func (p *PullLoop) run(ctx context.Context) {
	defer close(p.done)
	defer p.cancel()
	lastMsg := p.o.now()
	for {
		p.mu.Lock()
		it := p.it
		p.mu.Unlock()
		// Next is woken regularly: nats.go (v1.55) issues the next pull
		// request only at the top of Next, and skips it while the previous
		// one is still being sent. When the server answers that one before
		// its sender goroutine runs again (a loaded host), a Next blocked
		// with nothing requested waits for the missed-heartbeat timeout,
		// 30s; waking it lets it ask again.
		m, err := it.Next(natsjs.NextMaxWait(p.o.wake))
		if errors.Is(err, nats.ErrTimeout) {
			// A timed-out Next also stops the iterator's heartbeat check,
			// so a pull request the server lost is caught here instead:
			// after a long silence the iterator is reopened.
			if p.o.now().Sub(lastMsg) >= p.o.idleReopen {
				lastMsg = p.o.now()
				p.reopenIdle()
			}
			continue
		}
		if err != nil {
			if errors.Is(err, natsjs.ErrMsgIteratorClosed) {
				if p.reopen() {
					continue
				}
				if errors.Is(err, natsjs.ErrConnectionClosed) {
					p.o.logger.Warn("pull loop ended: nats connection closed")
				}
				return
			}
			// The iterator keeps pulling by itself after a reconnect or a
			// missed heartbeat; an error that ends it (the consumer was
			// deleted) is followed by ErrMsgIteratorClosed.
			p.o.logger.Warn("pull", "err", err)
			continue
		}
		lastMsg = p.o.now()
		p.mu.Lock()
		nak := p.nak
		p.mu.Unlock()
		if nak {
			if err := m.Nak(); err != nil {
				p.o.logger.Debug("nak of a buffered message failed", "err", err)
			}
			continue
		}
		// The consumer owns the delivery from here, whatever Submit says:
		// a refused one is already NAKed.
		_ = p.sink.Submit(ctx, jsDelivery(m, p.o.now(), p.timing))
		p.adapt()
	}
}

// reopen starts the iterator again after a drain for a resize.
func (p *PullLoop) reopen() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping || p.resize == 0 {
		return false
	}
	it, err := p.open(p.resize)
	if err != nil {
		p.o.logger.Error("pull loop ended: reopening the iterator failed", "prefetch", p.resize, "err", err)
		return false
	}
	p.o.logger.Debug("prefetch resized", "from", p.size, "to", p.resize)
	p.it, p.size, p.resize = it, p.resize, 0
	return true
}

// reopenIdle drains the iterator to open it again at the same size, as a
// resize does, after the loop heard nothing for idleReopen.
func (p *PullLoop) reopenIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping || p.resize != 0 {
		return
	}
	p.o.logger.Debug("pull: nothing received for a while, reopening the iterator", "after", p.o.idleReopen)
	p.resize = p.size
	p.it.Drain()
}

func (p *PullLoop) stats() (consumer.Stats, bool) {
	if s, ok := p.sink.(statser); ok {
		return s.Stats(), true
	}
	return consumer.Stats{}, false
}

// adapt measures the sink's throughput and, when the prefetch target moved
// by a factor of two, drains the iterator to reopen it at the new size.
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
	if p.stopping || p.resize != 0 || (target < 2*p.size && 2*target > p.size) {
		return
	}
	p.o.logger.Info("prefetch follows throughput", "jobs_per_s", round1(jobsPerSec), "texts_per_s", round1(textsPerSec), "from", p.size, "to", target)
	p.resize = target
	p.it.Drain()
}

func round1(x float64) float64 { return float64(int(x*10+0.5)) / 10 }

// rateMeter turns the sink's running totals into a smoothed jobs/s and
// texts/s, counting only intervals in which the sink held work.
type rateMeter struct {
	at          time.Time
	jobs, texts uint64
	jobsRate    float64
	textsRate   float64
	seen        bool
}

func (r *rateMeter) start(now time.Time, st consumer.Stats) {
	r.at, r.jobs, r.texts = now, st.Jobs, st.Texts
}

// observe returns the smoothed rates once per interval; ok is false between
// measurements and after an idle interval.
func (r *rateMeter) observe(now time.Time, st consumer.Stats, every time.Duration) (jobs, texts float64, ok bool) {
	dt := now.Sub(r.at)
	if dt < every {
		return 0, 0, false
	}
	dj, dx := st.Jobs-r.jobs, st.Texts-r.texts
	r.at, r.jobs, r.texts = now, st.Jobs, st.Texts
	if st.Held == 0 || dj == 0 {
		return 0, 0, false
	}
	j, x := float64(dj)/dt.Seconds(), float64(dx)/dt.Seconds()
	if !r.seen {
		r.jobsRate, r.textsRate, r.seen = j, x, true
	} else {
		r.jobsRate, r.textsRate = (r.jobsRate+j)/2, (r.textsRate+x)/2
	}
	return r.jobsRate, r.textsRate, true
}

// PullOption tunes [Pull].
type PullOption func(*pullOptions)

type pullOptions struct {
	nc       *nats.Conn
	min, max int
	maxBytes int
	ackWait  time.Duration
	every    time.Duration
	// wake bounds one Next call; idleReopen is the silence after which
	// the iterator is reopened (see run).
	wake, idleReopen time.Duration
	logger           *slog.Logger
	now              func() time.Time
}

// Default prefetch limits of [Pull], in messages.
const (
	DefaultPrefetchMin = 8
	DefaultPrefetchMax = 1024
)

func defaultPullOptions() pullOptions {
	return pullOptions{
		min: DefaultPrefetchMin, max: DefaultPrefetchMax,
		every:      2 * time.Second,
		wake:       250 * time.Millisecond,
		idleReopen: 30 * time.Second,
		logger:     slog.Default(),
		now:        time.Now,
	}
}

// PrefetchLimits bounds the adaptive prefetch; the loop starts at lo.
// lo == hi fixes it.
func PrefetchLimits(lo, hi int) PullOption {
	return func(o *pullOptions) { o.min, o.max = lo, hi }
}

// PrefetchBytes caps the bytes of one pull request (PullMaxBytes through
// nats.go's PullMaxMessagesWithBytesLimit). It must not be below the
// largest job, or the loop stalls on it; 0 (the default) sets no cap.
func PrefetchBytes(n int) PullOption {
	return func(o *pullOptions) { o.maxBytes = n }
}

// PullAckWait sets the AckWait the prefetch is sized against; by default
// it is read from the consumer's info.
func PullAckWait(d time.Duration) PullOption {
	return func(o *pullOptions) { o.ackWait = d }
}

// PullMeasureEvery sets the throughput measurement interval (default 2s).
func PullMeasureEvery(d time.Duration) PullOption {
	return func(o *pullOptions) { o.every = d }
}

// PullConn gives the loop the connection of the consumer, which it needs
// to keep NAK delays exact on a consumer with BackOff (nats-server adds the
// backoff step to the delay otherwise; see delivery.go). Without it, NAK
// delays are sent as asked.
func PullConn(nc *nats.Conn) PullOption {
	return func(o *pullOptions) { o.nc = nc }
}

// PullLogger sets the logger of the loop (default slog.Default()).
func PullLogger(l *slog.Logger) PullOption {
	return func(o *pullOptions) {
		if l != nil {
			o.logger = l
		}
	}
}
