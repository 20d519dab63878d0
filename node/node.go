package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/internal/telemetry"
	"github.com/jetembed/jetembed/jetstream"
)

// Node is one serving process: see the package doc. Build it with
// [New], start it with [Node.Start]; it serves until [Node.Stop], or
// until it ends on its own ([Node.Done], [Node.Err]): a fatal engine
// error, or a worker that stopped for a reason a new connection would not
// cure. A Node is started once.
type Node struct {
	cfg     Config
	log     *slog.Logger
	metrics *telemetry.Metrics
	live    liveState

	// stop carries Stop's context (the drain's deadline) to the serving
	// loop; cancel ends a reconnect in progress.
	stop     chan context.Context
	stopOnce sync.Once
	runCtx   context.Context
	cancel   context.CancelFunc
	done     chan struct{}
	endOnce  sync.Once
	err      error // why it ended; set before done closes

	startOnce sync.Once
	stopHTTP  func()
	eng       Engine
}

// New checks cfg and returns a node of it; nothing starts until
// [Node.Start].
func New(cfg Config) (*Node, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	mp := cfg.MeterProvider
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	metrics, err := telemetry.NewMetrics(mp)
	if err != nil {
		return nil, err
	}
	if cfg.MetricTenants != 0 {
		metrics.LimitTenants(max(cfg.MetricTenants, 0))
	}
	metrics.NameTenants(cfg.TenantNames)
	runCtx, cancel := context.WithCancel(context.Background())
	return &Node{cfg: cfg, log: cfg.Logger, metrics: metrics, stop: make(chan context.Context, 1),
		runCtx: runCtx, cancel: cancel, done: make(chan struct{}), stopHTTP: func() {}}, nil
}

// Start starts the health server, connects, checks the server's objects,
// opens the engine (warm-up included: /readyz says ready after it) and
// starts serving on the connection: the fleet membership, the worker and
// the HTTP API. It returns once the process is ready, or with the error
// that kept it from being so (nothing is left running then). ctx bounds
// the start only.
func (r *Node) Start(ctx context.Context) error {
	err := errors.New("node: started twice")
	r.startOnce.Do(func() { err = r.start(ctx) })
	return err
}

func (r *Node) start(ctx context.Context) (err error) {
	warnUnscoped(r.log, r.cfg.Loop.Replies)
	// Not assigned to r.stopHTTP before it succeeded: end calls it.
	stopHTTP, err := startHTTP(r.log, r.cfg.HTTP, r.live.health(), r.cfg.MetricsHandler)
	if err != nil {
		r.end(err)
		return err
	}
	r.stopHTTP = stopHTTP
	nc, err := jetstream.Connect(ctx, r.cfg.NATS)
	if err != nil {
		r.end(err)
		return err
	}
	fail := func(err error) error {
		nc.Close()
		r.end(err)
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(err)
	}
	if err := checkObjects(ctx, r.log, js, r.cfg.objectsToCheck(), r.cfg.Check, nc.LastError); err != nil {
		return fail(err)
	}
	if r.eng, err = r.openEngine(ctx, js); err != nil {
		return fail(err)
	}
	r.live.engine.Store(r.eng.Engine)
	r.live.loaded.Store(true)
	r.live.warmed.Store(true)
	s, lost, err := r.serveOn(ctx, nc, js, true)
	if err != nil {
		if lost {
			err = fmt.Errorf("the nats connection closed while starting: %w", err)
		}
		return fail(err)
	}
	go r.loop(s)
	return nil
}

// openEngine opens the engine (SetMetrics on it) and, with ShareProbe,
// installs a peer's cost coefficients or probes and shares its own.
func (r *Node) openEngine(ctx context.Context, js natsjs.JetStream) (Engine, error) {
	eng, err := r.cfg.Open(ctx)
	if err != nil {
		return Engine{}, err
	}
	if eng.Engine == nil {
		return Engine{}, fmt.Errorf("%w: Open returned no engine", ErrConfig)
	}
	if _, _, err := eng.Engine.SetBudgets(r.cfg.InFlightTokens, r.cfg.InteractiveTokens); err != nil {
		eng.Engine.Close()
		return Engine{}, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if f := r.cfg.Fleet; f.On && f.ShareProbe {
		kv, err := jetstream.OpenKVStore(ctx, js, r.cfg.Objects.Engines.Name)
		if err == nil {
			err = probeShare{log: r.log, kv: kv, member: f.Member.WithDefaults(), arch: f.Hardware}.share(ctx, eng.Engine)
		}
		if err != nil {
			eng.Engine.Close()
			return Engine{}, err
		}
	}
	// Tokenize time, per-session runs, guard refusals.
	eng.Engine.SetMetrics(r.metrics)
	return eng, nil
}

// loop serves s until it ends, dialling again each time the server closed
// the connection for good, and ends the node.
func (r *Node) loop(s *session) {
	quick := 0 // connections in a row that lasted less than a minute
	for {
		start := time.Now()
		lost, err := s.wait()
		if !lost {
			r.end(err)
			return
		}
		if quick++; time.Since(start) > time.Minute {
			quick = 1
		}
		nc := s.nc
		r.log.Warn("nats connection closed by the server; connecting again", "err", nc.LastError())
		nc.Close()
		if s, err = r.reconnect(quick); err != nil || s == nil {
			r.end(err)
			return
		}
	}
}

// reconnect dials again and serves on the new connection; it returns nil
// and no error when the node was stopped meanwhile (nothing is held).
func (r *Node) reconnect(quick int) (*session, error) {
	for {
		nc, err := jetstream.Reconnect(r.runCtx, r.cfg.NATS, quick)
		if err != nil {
			if r.runCtx.Err() != nil {
				return nil, nil
			}
			return nil, err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return nil, err
		}
		s, lost, err := r.serveOn(r.runCtx, nc, js, false)
		switch {
		case err == nil:
			return s, nil
		case r.runCtx.Err() != nil:
			nc.Close()
			return nil, nil
		case !lost:
			nc.Close()
			return nil, err
		}
		r.log.Warn("nats connection closed while serving again; connecting again", "err", err)
		nc.Close()
		quick++
	}
}

// end records why the node ended, closes the engine and the health
// server, and closes Done. The first call wins.
func (r *Node) end(err error) {
	r.endOnce.Do(func() {
		r.cancel()
		r.err = err
		if r.eng.Engine != nil {
			r.eng.Engine.Close()
		}
		r.stopHTTP()
		close(r.done)
	})
}

// Stop stops serving: fetching stops at once (buffered jobs go back to the
// server), the HTTP API finishes its calls, in-flight jobs finish until
// ctx ends (then are NAKed), the fleet is left, the connection drained
// and the engine closed. It returns once everything has stopped, with the
// error the node ended with: nil when it ended because it was asked to,
// the cause when it had ended on its own. Stop before Start, or after the
// runtime ended, only waits for the end.
func (r *Node) Stop(ctx context.Context) error {
	r.stopOnce.Do(func() {
		r.live.draining.Store(true)
		r.stop <- ctx
		r.cancel()
	})
	r.startOnce.Do(func() { r.end(nil) }) // never started: nothing to stop
	<-r.done
	return r.err
}

// Done is closed once the node has ended: after [Node.Stop], or on
// its own (see [Node.Err]).
func (r *Node) Done() <-chan struct{} { return r.done }

// Err is nil while the node serves and after a requested stop, and the
// cause once it ended on its own: an error wrapping [engine.ErrFatal]
// after a fatal engine-build error, or [jetstream.ErrWorkerStopped] when
// the worker stopped for a reason a new connection would not cure.
func (r *Node) Err() error {
	select {
	case <-r.done:
		return r.err
	default:
		return nil
	}
}

// Run starts a node of cfg and serves until ctx ends (SIGTERM), then
// stops it, giving in-flight jobs [Config.Grace] to finish. It returns nil
// after that stop, and the error when the start failed or the node
// ended on its own.
func Run(ctx context.Context, cfg Config) error {
	r, err := New(cfg)
	if err != nil {
		return err
	}
	if err := r.Start(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		r.log.Info("stopping: draining in-flight jobs", "grace", r.cfg.Grace)
	case <-r.Done():
	}
	grace, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Grace)
	defer cancel()
	return r.Stop(grace)
}

// drainConn drains the NATS connection (flushing the last ACKs) and waits
// for it to close.
func drainConn(nc *nats.Conn) error {
	if err := nc.Drain(); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for !nc.IsClosed() {
		if time.Now().After(deadline) {
			return errors.New("connection not closed after drain")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// engineErr turns a fatal engine error into the node's end.
func engineErr(e *engine.Engine) error { return fmt.Errorf("%w: %w", engine.ErrFatal, e.FatalErr()) }
