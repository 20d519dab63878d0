package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// RunnerFactory loads the model session with the given index (0-based).
// The pool calls it on the session's own locked OS thread, at start and
// again after the circuit breaker dropped the session.
type RunnerFactory func(session int) (Runner, error)

var (
	// ErrUnavailable means no session is loaded: every one was dropped by
	// the circuit breaker and has not reloaded yet.
	ErrUnavailable = errors.New("engine: no model session available")
	// ErrClosed means the engine was closed.
	ErrClosed = errors.New("engine: closed")

	errOverloaded = errors.New("engine: in-flight token budget full")
)

// pool runs chunks on its sessions. One scheduler (dispatch, under mu)
// sends each chunk to the least-loaded loaded session; each session is a
// goroutine locked to an OS thread, as GPU contexts and ORT's thread-local
// state want.
//
// Lock order: pool.mu, then pool.sched.
type pool struct {
	cfg     Config
	factory RunnerFactory
	// rewarm lists inputs a reloaded session runs before it takes chunks
	// again; nil runs none.
	rewarm   func() []RunInput
	sessions []*session
	wg       sync.WaitGroup

	mu     sync.RWMutex // dispatch holds it shared, close exclusively
	closed bool
	// sched makes picking a session and charging its load one step, so
	// concurrent callers see each other's chunks when they pick.
	sched sync.Mutex
}

// task is one chunk for a session. It carries the caller's context across
// the channel: the session runs it on the caller's behalf and must stop
// when the caller gives up.
type task struct {
	ctx   context.Context
	in    RunInput
	load  int64
	chunk int
	done  chan<- result
}

type result struct {
	chunk, session int
	out            RunOutput
	err            error
}

// session is one model session and its worker. Only the worker touches
// runner and fails; the rest are atomics read by Stats and dispatch.
type session struct {
	idx    int
	tasks  chan task
	runner Runner
	fails  int

	loaded              atomic.Bool
	load                atomic.Int64 // queued + running cost
	busy                atomic.Int64 // nanoseconds in Run
	runs, errs, reloads atomic.Int64
	consecutive         atomic.Int64
	loadErr             atomic.Pointer[error]
}

// newPool starts the sessions and waits until each tried to load once. It
// fails only if no session loaded: a pool with some sessions down still
// serves while the rest retry.
func newPool(cfg Config, factory RunnerFactory, onRun func(Shape), rewarm func() []RunInput) (*pool, error) {
	p := &pool{cfg: cfg, factory: factory, rewarm: rewarm}
	var errs []error
	var mu sync.Mutex
	var started sync.WaitGroup
	for i := 0; i < cfg.Sessions; i++ {
		s := &session{idx: i, tasks: make(chan task, 256)}
		p.sessions = append(p.sessions, s)
		started.Add(1)
		p.wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if err := s.reload(p); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			started.Done()
			s.loop(p, onRun)
		})
	}
	started.Wait()
	if len(errs) == cfg.Sessions {
		p.close()
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, errors.Join(errs...))
	}
	return p, nil
}

func (s *session) reload(p *pool) error {
	r, err := p.factory(s.idx)
	if err != nil {
		err = fmt.Errorf("session %d: load: %w", s.idx, err)
		s.loadErr.Store(&err)
		return err
	}
	s.runner, s.fails = r, 0
	s.consecutive.Store(0)
	s.loadErr.Store(nil)
	s.loaded.Store(true)
	return nil
}

// reloaded counts a reload and re-runs the warmed shapes on the fresh
// runner, so it does not compile them in band when chunks arrive. A
// failure drops the session again; it retries after the backoff.
func (s *session) reloaded(p *pool) {
	s.reloads.Add(1)
	if p.rewarm == nil {
		return
	}
	for _, in := range p.rewarm() {
		if _, err := s.runner.Run(context.Background(), in); err != nil {
			s.errs.Add(1)
			err = fmt.Errorf("session %d: re-warm %dx%d: %w", s.idx, in.Batch, in.Seq, err)
			s.loadErr.Store(&err)
			s.drop()
			return
		}
	}
}

// drop closes the runner after the breaker tripped.
func (s *session) drop() {
	s.loaded.Store(false)
	if s.runner != nil {
		_ = s.runner.Close() // the session is being replaced; its close error changes nothing
		s.runner = nil
	}
}

func (s *session) loop(p *pool, onRun func(Shape)) {
	defer s.drop()
	var retry <-chan time.Time
	for {
		if s.runner == nil && retry == nil {
			retry = time.After(p.cfg.ReloadBackoff)
		}
		select {
		case t, ok := <-s.tasks:
			if !ok {
				return
			}
			t.done <- s.run(p, t, onRun)
			s.load.Add(-t.load)
		case <-retry:
			retry = nil
			if s.reload(p) == nil {
				s.reloaded(p)
			}
		}
	}
}

func (s *session) run(p *pool, t task, onRun func(Shape)) result {
	res := result{chunk: t.chunk, session: s.idx}
	if s.runner == nil {
		res.err = fmt.Errorf("%w: session %d is reloading", ErrUnavailable, s.idx)
		return res
	}
	if err := t.ctx.Err(); err != nil {
		res.err = err // queued behind other chunks past the caller's deadline
		return res
	}
	start := time.Now()
	res.out, res.err = s.runner.Run(t.ctx, t.in)
	s.busy.Add(int64(time.Since(start)))
	s.runs.Add(1)
	if res.err == nil {
		s.fails = 0
		s.consecutive.Store(0)
		onRun(Shape{t.in.Batch, t.in.Seq})
		return res
	}
	if t.ctx.Err() != nil {
		// The caller gave up; that says nothing about the session.
		res.err = fmt.Errorf("%w (%w)", t.ctx.Err(), res.err)
		return res
	}
	s.errs.Add(1)
	s.fails++
	s.consecutive.Store(int64(s.fails))
	res.err = fmt.Errorf("session %d: run %dx%d: %w", s.idx, t.in.Batch, t.in.Seq, res.err)
	if s.fails >= p.cfg.BreakerThreshold {
		s.drop()
		if s.reload(p) == nil {
			s.reloaded(p)
		}
	}
	return res
}

// dispatch queues t on the least-loaded loaded session, or on session
// want when want >= 0 (warm-up runs every session).
func (p *pool) dispatch(t task, want int) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrClosed
	}
	p.sched.Lock()
	var best *session
	for _, s := range p.sessions {
		if want >= 0 && s.idx != want || !s.loaded.Load() {
			continue
		}
		if best == nil || s.load.Load() < best.load.Load() {
			best = s
		}
	}
	if best != nil {
		best.load.Add(t.load)
	}
	p.sched.Unlock()
	if best == nil {
		return ErrUnavailable
	}
	best.tasks <- t
	return nil
}

// available counts the loaded sessions.
func (p *pool) available() int {
	n := 0
	for _, s := range p.sessions {
		if s.loaded.Load() {
			n++
		}
	}
	return n
}

func (p *pool) close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		for _, s := range p.sessions {
			close(s.tasks)
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
}
