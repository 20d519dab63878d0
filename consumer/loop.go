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
	// ErrRunning is returned by a second Run.
	ErrRunning = errors.New("consumer: already running")
)

// Loop is the job loop. Deliveries enter through [Loop.Submit], from
// the JetStream fetch loop and the request-reply handler alike, which
// starts each job's Embed call at once: the engine's one admission queue
// decides when its texts run (what waits, waits there), and packs them
// with every other call's. Every delivery is settled as soon as its own
// texts are done; [Loop.Drain] stops it gracefully, [Loop.Run] waits for
// it.
type Loop struct {
	cfg       Config
	emb       engine.Embedder
	pub       Publisher
	model     string
	maxTokens int // the engine's, 0 when it does not say
	precision string
	// cacheModel names the model in the cache's keys (Config.CacheModel).
	cacheModel string
	cache      cacheState
	flights    flights // texts in flight, computed once across jobs (flight.go)

	mu   sync.Mutex
	held map[*job]struct{}
	kept map[*kept]struct{} // a fetch loop's buffered messages (keep.go)
	// stopped is set once Run stopped taking work (a hard stop): nothing
	// is started after that.
	stopped  bool
	draining chan struct{} // closed by Drain
	running  bool
	inflight sync.WaitGroup // the Embed calls started by Submit
	done     chan struct{}  // closed when Run returned
	// workCtx is the parent of every job's Embed call; cancelWork (the
	// hard stop) ends them. Set in New: Submit may start jobs before Run.
	workCtx    context.Context
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
	// Held counts deliveries admitted by the engine and not yet settled.
	Held int
	// Waiting counts deliveries waiting for room in the engine's
	// admission queue (held by this process, not admitted yet).
	Waiting int
}

// New returns a consumer of emb's vectors that sends results and dead
// letters through pub. It does nothing until [Loop.Submit].
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
		kept:     make(map[*kept]struct{}),
		draining: make(chan struct{}),
		done:     make(chan struct{}),
	}
	c.workCtx, c.cancelWork = context.WithCancel(context.Background())
	limits := cfg.Delivery
	c.limits.Store(&limits)
	if c.model == "" {
		c.model = emb.ModelID()
	}
	c.maxTokens = emb.MaxTokens()
	c.precision = precisionOf(cfg.Precision, emb)
	c.cacheModel = cfg.CacheModel
	if c.cacheModel == "" {
		c.cacheModel = c.model
	}
	return c, nil
}

// Stats returns a snapshot; it is cheap and safe to call concurrently.
func (c *Loop) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Stats{Jobs: c.jobs.Load(), Texts: c.texts.Load(), Tokens: c.tokens.Load()}
	for j := range c.held {
		if j.isAdmitted() {
			st.Held++
		} else {
			st.Waiting++
		}
	}
	return st
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
// Submit starts the job's Embed call, which waits for room in the
// engine's one admission queue ([engine.Call]: its class, tenant and
// deadline). A request-reply delivery ([*Request]) never blocks Submit:
// it waits there, fair by tenant, and is answered overloaded only when the
// engine refuses it (its tenant at its share of a full queue, pushed out
// by a tenant under its share, or unable to start before its deadline at
// the measured drain rate; a bulk backlog never fills its budget). A
// stored job blocks Submit until the engine admitted it, so the fetch
// loop stops pulling while the budget is full; when ctx ends first (the
// delivery is NAKed without delay, ctx's error returned) or Drain begins
// (NAKed, [ErrDraining]) it leaves the queue.
func (c *Loop) Submit(ctx context.Context, d Delivery) error {
	now := c.cfg.Now()
	j, jobErr := c.safeAdmit(d, now)
	if jobErr != nil {
		c.settle(ctx, j, c.decide(j, nil, jobErr))
		return nil
	}
	c.mu.Lock()
	if c.isDraining() || c.stopped {
		c.mu.Unlock()
		c.settle(ctx, j, c.decide(j, nil, errShutdown))
		return ErrDraining
	}
	j.admitted = make(chan struct{})
	var jobCtx context.Context
	jobCtx, j.cancel = context.WithCancel(c.workCtx)
	j.queued = now
	c.held[j] = struct{}{}
	c.inflight.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.inflight.Done()
		defer j.cancel()
		c.runJob(jobCtx, j)
	}()
	if j.req != nil {
		return nil
	}
	select {
	case <-j.admitted:
		return nil
	case <-c.draining:
		j.leave()
		return ErrDraining
	case <-ctx.Done():
		j.leave()
		return ctx.Err()
	}
}

// leave takes a job that waits for room out of the engine's queue: its
// Embed call ends, and the job is NAKed without delay (a request is
// answered engine_unavailable). One already admitted runs on.
func (j *job) leave() {
	j.mu.Lock()
	admitted := j.admittedSet
	if !admitted {
		j.leaving = true
	}
	j.mu.Unlock()
	if !admitted {
		j.cancel()
	}
}

// markAdmitted marks j admitted by the engine ([engine.Call.Admitted]):
// it holds budget now, until it is settled (release), and Submit returns.
func (j *job) markAdmitted(release func()) {
	j.mu.Lock()
	defer j.mu.Unlock()
	// A job may make a second Embed call (texts another job had in
	// flight and failed): it holds both budgets until it is settled.
	if prev := j.budget; prev != nil && release != nil {
		j.budget = func() { prev(); release() }
	} else if release != nil {
		j.budget = release
	}
	if j.leaving {
		return
	}
	j.admittedSet = true
	j.wakeLocked()
}

// releaseBudget gives back the engine budget j holds, if any.
func (j *job) releaseBudget() {
	j.mu.Lock()
	release := j.budget
	j.budget = nil
	j.mu.Unlock()
	if release != nil {
		release()
	}
}

// wake lets Submit return: the job's run ended, admitted or not.
func (j *job) wake() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.wakeLocked()
}

func (j *job) wakeLocked() {
	if !j.woken && j.admitted != nil {
		j.woken = true
		close(j.admitted)
	}
}

func (j *job) isAdmitted() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.admittedSet
}

// safeAdmit is admit with a panic (a decoder bug) turned into an internal
// error: NAKed with backoff, then terminated at MaxDeliver, never a crash.
func (c *Loop) safeAdmit(d Delivery, now time.Time) (j *job, jobErr error) {
	defer func() {
		if p := recover(); p != nil {
			j = newJob(d, now)
			c.cfg.Logger.Error("decoding a job panicked", "panic", fmt.Sprint(p), "delivered", j.delivered)
			j.id = header(j.a.Header, schema.HeaderMsgID)
			jobErr = schema.Errorf(schema.CodeInternal, "internal error decoding the job")
			// The reply is checked here too: a request whose reply is
			// outside its tenant's space gets no answer, panic or not.
			var tenantErr *schema.Error
			if j.tenant, tenantErr = c.tenantOf(j); tenantErr != nil {
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

// release forgets a settled job and gives back its engine budget.
func (c *Loop) release(j *job) {
	j.releaseBudget()
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.held, j)
}

// Run sends heartbeats for the held deliveries until ctx is done or
// [Loop.Drain] finished the work. Cancelling ctx is the hard stop: running
// Embed calls are cancelled and every held delivery is NAKed without
// delay. Run returns nil after a drain, ctx's error otherwise.
func (c *Loop) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.running {
		c.mu.Unlock()
		return ErrRunning
	}
	c.running = true
	c.mu.Unlock()
	defer close(c.done)

	hbCtx, hbStop := context.WithCancel(context.WithoutCancel(ctx))
	var hb sync.WaitGroup
	hb.Go(func() { c.heartbeats(hbCtx) })
	defer hb.Wait()
	defer hbStop()

	select {
	case <-ctx.Done():
		c.cancelWork()
	case <-c.draining:
	}
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	c.inflight.Wait()
	c.cancelWork()
	if ctx.Err() != nil && !c.isDraining() {
		return ctx.Err()
	}
	return nil
}

// leaveQueue takes every held job still waiting for room out of the
// engine's queue.
func (c *Loop) leaveQueue() {
	c.mu.Lock()
	var waiting []*job
	for j := range c.held {
		waiting = append(waiting, j)
	}
	c.mu.Unlock()
	for _, j := range waiting {
		j.leave()
	}
}

// Drain stops accepting deliveries, NAKs without delay those still
// waiting for room in the engine's queue (a request is answered
// engine_unavailable), and waits for the jobs in flight to be settled.
// When ctx ends first, the running Embed calls are cancelled, their jobs
// NAKed, and Drain returns ctx's error once everything is settled. Run
// then returns nil.
func (c *Loop) Drain(ctx context.Context) error {
	c.mu.Lock()
	if !c.isDraining() {
		close(c.draining)
	}
	running := c.running
	c.mu.Unlock()
	c.leaveQueue()
	settled := c.done
	if !running {
		ch := make(chan struct{})
		go func() { c.inflight.Wait(); close(ch) }()
		settled = ch
	}
	select {
	case <-settled:
		return nil
	case <-ctx.Done():
		c.cancelWork()
		<-settled
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
	var (
		due  []*job
		keep []*kept
	)
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
		keep = keep[:0]
		for k := range c.kept {
			keep = append(keep, k)
		}
		c.mu.Unlock()
		for _, j := range due {
			j.heartbeat(now, every)
		}
		for _, k := range keep {
			k.heartbeat(now, every)
		}
	}
}
