package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/schema"
)

var (
	// ErrDraining is returned by Submit once Drain has begun: the delivery
	// was NAKed without delay (or answered engine_unavailable).
	ErrDraining = errors.New("consumer: draining")
	// ErrOverloaded is returned by Submit for a request-reply delivery that
	// found the interactive in-flight budget full: it was answered
	// overloaded.
	ErrOverloaded = errors.New("consumer: in-flight budget full")
	// ErrRunning is returned by a second Run.
	ErrRunning = errors.New("consumer: already running")
)

// Loop is the job loop. Deliveries enter through [Loop.Submit], from
// the JetStream fetch loop and the request-reply handler alike; [Loop.Run]
// hands each job to the engine in its own Embed call (the engine's one queue
// packs the texts of all of them) and settles every delivery as soon as its
// own texts are done; [Loop.Drain] stops it gracefully.
type Loop struct {
	cfg       Config
	emb       engine.Embedder
	pub       Publisher
	model     string
	maxTokens int // the engine's, 0 when it does not say
	precision string
	cache     cacheState

	mu      sync.Mutex
	queue   []*job // admitted, not yet handed to the engine
	held    map[*job]struct{}
	waiting map[*job]struct{} // blocked in Submit for budget
	// heldTokens are the estimated tokens held, bulk [0] and interactive
	// [1], each against its own budget.
	heldTokens [2]int
	// waitReq are the request-reply deliveries waiting for interactive
	// room, per tenant in arrival order (see requests.go); meter measures
	// the interactive drain rate.
	waitReq waitQueue
	meter   drainMeter
	// stopped is set once the queue was given back: nothing joins it
	// after that.
	stopped    bool
	space      chan struct{} // closed when held tokens drop
	arrived    chan struct{} // a job was queued (capacity 1)
	draining   chan struct{} // closed by Drain
	running    bool
	done       chan struct{} // closed when Run returned
	cancelWork context.CancelFunc

	limits        atomic.Pointer[DeliveryLimits]
	noReplyWarned atomic.Bool
	// warnedBulk are the tenants told that their interactive jobs run as
	// bulk ([Consumer.mayInteract]).
	warnedMu    sync.Mutex
	warnedBulk  map[string]bool
	jobs, texts atomic.Uint64
	tokens      atomic.Uint64
}

// Stats is a snapshot for the heartbeat log line and metrics.
type Stats struct {
	// Jobs, Texts and Tokens are running totals of jobs settled, texts
	// embedded and real tokens run since start.
	Jobs, Texts, Tokens uint64
	// Held counts deliveries not yet settled; Queued those of them not yet
	// handed to the engine; HeldTokens their estimated tokens.
	Held, Queued, HeldTokens int
	// Waiting counts request-reply deliveries waiting for interactive room
	// (not held yet).
	Waiting int
}

// New returns a consumer of emb's vectors that sends results and dead
// letters through pub. It does nothing until [Loop.Run].
func New(cfg Config, emb engine.Embedder, pub Publisher) (*Loop, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if emb == nil || pub == nil {
		return nil, fmt.Errorf("%w: nil Embedder or Publisher", ErrConfig)
	}
	c := &Loop{
		cfg:      cfg,
		emb:      emb,
		pub:      pub,
		model:    cfg.Model,
		held:     make(map[*job]struct{}),
		waiting:  make(map[*job]struct{}),
		space:    make(chan struct{}),
		arrived:  make(chan struct{}, 1),
		draining: make(chan struct{}),
		done:     make(chan struct{}),
	}
	limits := cfg.Delivery
	c.limits.Store(&limits)
	if c.model == "" {
		c.model = emb.ModelID()
	}
	c.maxTokens = emb.MaxTokens()
	c.precision = precisionOf(cfg.Precision, emb)
	return c, nil
}

// Stats returns a snapshot; it is cheap and safe to call concurrently.
func (c *Loop) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{
		Jobs: c.jobs.Load(), Texts: c.texts.Load(), Tokens: c.tokens.Load(),
		Held: len(c.held), Queued: len(c.queue), HeldTokens: c.heldTokens[0] + c.heldTokens[1],
		Waiting: c.waitReq.len(),
	}
}

func (c *Loop) isDraining() bool {
	select {
	case <-c.draining:
		return true
	default:
		return false
	}
}

// Submit hands a delivery to the loop, which owns it from then on: it is
// ACKed, NAKed or terminated exactly once, whatever Submit returns, and the
// caller must not settle it. Bad input is settled before Submit returns.
//
// While the job's in-flight token budget (bulk, or interactive for
// request-reply deliveries and jobs with priority "interactive") is full,
// Submit blocks until there is room, ctx is done (the delivery is NAKed
// without delay and ctx's error returned) or Drain begins (NAKed,
// [ErrDraining]). A request-reply delivery (Respond set) never blocks
// Submit: it waits in a queue of its own, fair by tenant (each tenant's in
// arrival order, tenants in turn), and is answered overloaded (Submit
// returns [ErrOverloaded]) only when its tenant is at its share of a full
// queue, it was pushed out by a tenant under its share, or it could not
// start before its deadline at the measured drain rate (see requests.go);
// a bulk backlog never fills its budget.
func (c *Loop) Submit(ctx context.Context, d Delivery) error {
	now := c.cfg.Now()
	j, jobErr := c.safeAdmit(d, now)
	if jobErr != nil {
		c.settle(ctx, j, c.decide(j, nil, jobErr))
		return nil
	}
	c.mu.Lock()
	for {
		if c.isDraining() || c.stopped {
			c.mu.Unlock()
			c.settle(ctx, j, c.decide(j, nil, errShutdown))
			return ErrDraining
		}
		budget := c.budget(j)
		j.cost = min(max(j.tokens, 1), budget)
		// No request passes one waiting.
		if c.heldTokens[j.class()]+j.cost <= budget && (d.Respond == nil || c.waitReq.len() == 0) {
			break
		}
		if d.Respond != nil {
			evicted, se := c.queueRequest(j, now)
			c.mu.Unlock()
			c.evict(ctx, evicted)
			if se == nil {
				return nil
			}
			c.settle(ctx, j, c.decide(j, nil, se))
			return ErrOverloaded
		}
		// Heartbeats keep it alive meanwhile: the wait can outlast AckWait.
		space := c.space
		c.waiting[j] = struct{}{}
		c.mu.Unlock()
		var done error
		select {
		case <-space:
		case <-c.draining:
		case <-ctx.Done():
			done = ctx.Err()
		}
		c.mu.Lock()
		delete(c.waiting, j)
		if done != nil {
			c.mu.Unlock()
			c.settle(ctx, j, c.decide(j, nil, errShutdown))
			return done
		}
	}
	c.hold(j, c.cfg.Now())
	c.mu.Unlock()
	return nil
}

// hold charges j to its budget and hands it to Run, which starts its
// Embed call. c.mu is held.
func (c *Loop) hold(j *job, now time.Time) {
	if j.interactive {
		c.meter.tick(now, c.heldTokens[1] > 0, 0)
	}
	c.heldTokens[j.class()] += j.cost
	c.held[j] = struct{}{}
	j.queued = now
	c.queue = append(c.queue, j)
	select {
	case c.arrived <- struct{}{}:
	default:
	}
}

// budget is the in-flight budget of j's class.
func (c *Loop) budget(j *job) int {
	if j.interactive {
		return c.cfg.InteractiveTokens
	}
	return c.cfg.InFlightTokens
}

// class indexes heldTokens: 0 bulk, 1 interactive.
func (j *job) class() int {
	if j.interactive {
		return 1
	}
	return 0
}

// safeAdmit is admit with a panic (a decoder bug) turned into an internal
// error: NAKed with backoff, then terminated at MaxDeliver, never a crash.
func (c *Loop) safeAdmit(d Delivery, now time.Time) (j *job, jobErr error) {
	defer func() {
		if p := recover(); p != nil {
			c.cfg.Logger.Error("decoding a job panicked", "panic", fmt.Sprint(p), "delivered", d.NumDelivered)
			j = &job{d: d, id: header(d.Header, schema.HeaderMsgID), queued: now, lastTouch: now}
			jobErr = schema.Errorf(schema.CodeInternal, "internal error decoding the job")
			// The reply is checked here too: a request whose reply is
			// outside its tenant's space gets no answer, panic or not.
			var tenantErr *schema.Error
			if j.tenant, tenantErr = c.tenantOf(d); tenantErr != nil {
				jobErr = tenantErr
			} else if reply, replyErr := c.replyOf(j); replyErr != nil {
				jobErr = replyErr
			} else {
				j.reply = reply
			}
		}
	}()
	j, se := c.admit(d, now)
	if se != nil {
		return j, se
	}
	return j, nil
}

// release forgets a settled job and frees its budget.
func (c *Loop) release(j *job) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.held[j]; !ok {
		return
	}
	delete(c.held, j)
	if j.interactive {
		now := c.cfg.Now()
		c.meter.tick(now, true, j.cost)
		c.heldTokens[1] -= j.cost
		if !c.stopped && !c.isDraining() {
			c.admitWaiting(now)
		}
	} else {
		c.heldTokens[0] -= j.cost
	}
	close(c.space)
	c.space = make(chan struct{})
}

// Run hands jobs to the engine until ctx is done or [Loop.Drain] finished the
// work. Cancelling ctx is the hard stop: running Embed calls are cancelled
// and every held delivery is NAKed without delay. Run returns nil after a
// drain, ctx's error otherwise.
func (c *Loop) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.running {
		c.mu.Unlock()
		return ErrRunning
	}
	c.running = true
	workCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cancelWork = cancel
	c.mu.Unlock()
	defer close(c.done)
	defer cancel()

	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	hbCtx, hbStop := context.WithCancel(workCtx)
	var hb sync.WaitGroup
	hb.Go(func() { c.heartbeats(hbCtx) })
	defer hb.Wait()
	defer hbStop()

	// The in-flight budgets bound how many jobs run at once.
	var jobs sync.WaitGroup
	for {
		run, expired, ok := c.next(ctx)
		if !ok {
			break
		}
		for _, j := range expired {
			jobs.Go(func() {
				c.settle(workCtx, j, c.decide(j, nil, schema.Errorf(schema.CodeDeadlineExceeded, "deadline passed before the job ran")))
			})
		}
		for _, j := range run {
			jobs.Go(func() { c.runJob(workCtx, j) })
		}
	}
	c.nakQueued(workCtx)
	jobs.Wait()
	if ctx.Err() != nil && !c.isDraining() {
		return ctx.Err()
	}
	return nil
}

// nakQueued gives back every job not yet handed to the engine.
func (c *Loop) nakQueued(ctx context.Context) {
	c.mu.Lock()
	q := c.queue
	c.queue = nil
	c.stopped = true
	c.mu.Unlock()
	c.failWaiting(ctx)
	for _, j := range q {
		c.settle(ctx, j, c.decide(j, nil, errShutdown))
	}
}

// Drain stops accepting deliveries, NAKs without delay those admitted but
// not yet handed to the engine (and those waiting for room), and waits for
// the jobs in flight to be settled. When ctx ends
// first, the running Embed calls are cancelled, their jobs NAKed, and Drain
// returns ctx's error once everything is settled. Run then returns nil.
func (c *Loop) Drain(ctx context.Context) error {
	c.mu.Lock()
	if !c.isDraining() {
		close(c.draining)
	}
	running := c.running
	c.mu.Unlock()
	if !running {
		c.nakQueued(context.WithoutCancel(ctx))
		return nil
	}
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		c.cancelWork()
		<-c.done
		return ctx.Err()
	}
}

// Done is closed when Run has returned and every delivery it took is
// settled.
func (c *Loop) Done() <-chan struct{} { return c.done }

// heartbeats sends InProgress for every held message that waited longer
// than the configured fraction of AckWait, until ctx is done.
func (c *Loop) heartbeats(ctx context.Context) {
	every := c.heartbeatEvery()
	// At most a quarter second between looks, so a shorter AckWait learned
	// from the server after start (SetDeliveryLimits) is seen in time.
	period := func(every time.Duration) time.Duration {
		return min(max(every/4, time.Millisecond), 250*time.Millisecond)
	}
	t := time.NewTicker(period(every))
	defer t.Stop()
	var due []*job
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// The server's AckWait may have changed (SetDeliveryLimits).
		if e := c.heartbeatEvery(); e != every {
			every = e
			t.Reset(period(every))
		}
		now := c.cfg.Now()
		c.mu.Lock()
		due = due[:0]
		for j := range c.held {
			due = append(due, j)
		}
		for j := range c.waiting {
			due = append(due, j)
		}
		c.mu.Unlock()
		for _, j := range due {
			j.heartbeat(now, every)
		}
	}
}
