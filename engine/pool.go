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
)

// pool is the sessions and the scheduler they pull from. Each session is
// a goroutine locked to an OS thread, as GPU contexts and ORT's
// thread-local state want; when free it pulls its next chunk from sched.
type pool struct {
	cfg     Config
	factory RunnerFactory
	// rewarm lists inputs a reloaded session runs before it takes chunks
	// again; nil runs none.
	rewarm   func() []RunInput
	sessions []*session
	sched    *sched
	// input lays out a chunk's rows (the engine's padding and ids).
	input func(w *work) RunInput
	wg    sync.WaitGroup
	done  chan struct{} // closed by close
	once  sync.Once
	// metrics is the engine's recorder ([Engine.SetMetrics]), nil for none.
	metrics atomic.Pointer[Metrics]
}

// recorder is the recorder in use, nil for none.
func (p *pool) recorder() Metrics {
	if m := p.metrics.Load(); m != nil {
		return *m
	}
	return nil
}

// task is a directed run (warm-up, probe) for session want, or any
// session when want < 0.
type task struct {
	in   RunInput
	want int
	done chan<- result
}

type result struct {
	session int
	err     error
}

// session is one model session and its worker. Only the worker touches
// runner and fails; the rest are atomics read by Stats.
type session struct {
	idx    int
	runner Runner
	fails  int

	loaded              atomic.Bool
	load                atomic.Int64 // modelled nanoseconds of the running chunk
	busy                atomic.Int64 // nanoseconds in Run
	runs, errs, reloads atomic.Int64
	consecutive         atomic.Int64
	loadErr             atomic.Pointer[error]
}

// newPool starts the sessions and waits until each tried to load once. It
// fails only if no session loaded: a pool with some sessions down still
// serves while the rest retry.
func newPool(cfg Config, factory RunnerFactory, sc *sched, input func(*work) RunInput, onRun func(Shape), rewarm func() []RunInput) (*pool, error) {
	p := &pool{cfg: cfg, factory: factory, rewarm: rewarm, sched: sc, input: input, done: make(chan struct{})}
	var errs []error
	var mu sync.Mutex
	var started sync.WaitGroup
	for i := 0; i < cfg.Sessions; i++ {
		s := &session{idx: i}
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
	for {
		if s.runner == nil {
			p.sched.failDirected(s.idx, fmt.Errorf("%w: session %d is reloading", ErrUnavailable, s.idx))
			select {
			case <-p.done:
				return
			case <-time.After(p.cfg.ReloadBackoff):
			}
			if s.reload(p) == nil {
				s.reloaded(p)
			}
			continue
		}
		w := p.sched.next(s.idx)
		if w == nil {
			return
		}
		if w.task != nil {
			err := s.run(p, context.Background(), w.task.in, onRun)
			w.task.done <- result{session: s.idx, err: err}
		} else {
			s.chunk(p, w, onRun)
		}
		p.sched.finished(w)
	}
}

// chunk runs one pulled chunk and reports it to its calls. Texts whose
// caller gave up while they waited are not run.
func (s *session) chunk(p *pool, w *work, onRun func(Shape)) {
	if w.err != nil {
		w.deliver(s.idx, RunOutput{}, w.err)
		return
	}
	ctx := w.rows[0].c.ctx
	for _, e := range w.rows[1:] {
		if e.c != w.rows[0].c {
			// Several callers share the run: no one caller may cancel it.
			ctx = context.Background()
			break
		}
	}
	if err := ctx.Err(); err != nil {
		w.deliver(s.idx, RunOutput{}, runError(err))
		return
	}
	in := p.input(w)
	s.load.Store(int64(p.sched.seconds(in.Batch, in.Seq) * 1e9))
	defer s.load.Store(0)
	start := time.Now()
	out, err := s.runOut(p, ctx, in, onRun)
	if err != nil {
		w.deliver(s.idx, RunOutput{}, runError(err))
		return
	}
	w.took = time.Since(start)
	p.sched.observe(in.Batch, in.Seq, w.took)
	w.deliver(s.idx, out, nil)
}

func (s *session) run(p *pool, ctx context.Context, in RunInput, onRun func(Shape)) error {
	_, err := s.runOut(p, ctx, in, onRun)
	return err
}

func (s *session) runOut(p *pool, ctx context.Context, in RunInput, onRun func(Shape)) (RunOutput, error) {
	if s.runner == nil {
		return RunOutput{}, fmt.Errorf("%w: session %d is reloading", ErrUnavailable, s.idx)
	}
	start := time.Now()
	out, err := s.runner.Run(ctx, in)
	took := time.Since(start)
	s.busy.Add(int64(took))
	if m := p.recorder(); m != nil {
		m.Run(ctx, sessionLabel(s.idx), took)
	}
	s.runs.Add(1)
	if err == nil {
		s.fails = 0
		s.consecutive.Store(0)
		onRun(Shape{in.Batch, in.Seq})
		return out, nil
	}
	if ctx.Err() != nil {
		// The caller gave up; that says nothing about the session.
		return out, fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	s.errs.Add(1)
	s.fails++
	s.consecutive.Store(int64(s.fails))
	err = fmt.Errorf("session %d: run %dx%d: %w", s.idx, in.Batch, in.Seq, err)
	if s.fails >= p.cfg.BreakerThreshold {
		s.drop()
		if s.reload(p) == nil {
			s.reloaded(p)
		}
	}
	return out, err
}

// dispatch queues a directed task on session want (any loaded session
// when want < 0).
func (p *pool) dispatch(t task, want int) error {
	ok := false
	for _, s := range p.sessions {
		if (want < 0 || s.idx == want) && s.loaded.Load() {
			ok = true
		}
	}
	if !ok {
		return ErrUnavailable
	}
	t.want = want
	return p.sched.dispatch(t)
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
	p.sched.close()
	p.once.Do(func() { close(p.done) })
	p.wg.Wait()
}
