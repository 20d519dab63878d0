package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/internal/consumer"
	"github.com/jetembed/jetembed/internal/mallocenv"
	"github.com/jetembed/jetembed/internal/telemetry"
	"github.com/jetembed/jetembed/internal/telemetry/export"
	"github.com/jetembed/jetembed/jetstream"
)

func init() {
	register(command{
		name:    "serve",
		summary: "consume embedding jobs from NATS JetStream and answer embed.v1.embed requests",
		run:     runServe,
	})
}

func runServe(ctx context.Context, args []string, io stdio) error {
	fs := newFlagSet("serve", io)
	nf := addNATSFlags(fs)
	pf := addProvisionFlags(fs, false)
	ef := addEngineFlags(fs, true)
	ff := addFleetFlags(fs)
	sf := addServeFlags(fs, "off")
	_, c, done, err := parseServe(fs, args, io, pf, ef, ff, sf)
	if done || err != nil {
		return err
	}
	log := telemetry.NewLogger(io.err, c.LogLevel, c.LogFormat)
	c.NATS = nf.options(log)
	return serve(ctx, log, c)
}

// liveState is what /readyz asks while the process starts and runs.
type liveState struct {
	loaded, warmed atomic.Bool
	// draining turns /readyz to 503 from the first moment of a shutdown,
	// so load balancers and Kubernetes route no new work here meanwhile.
	draining atomic.Bool
	// fatal turns /readyz to 503 for good: the engine met a fatal
	// engine-build error and the process is about to exit.
	fatal     atomic.Bool
	connected atomic.Pointer[func() bool]
	engine    atomic.Pointer[engine.Engine]
}

func (s *liveState) health() telemetry.Health {
	return telemetry.Health{
		ModelsLoaded: s.loaded.Load,
		WarmedUp:     s.warmed.Load,
		Draining:     func() bool { return s.draining.Load() || s.fatal.Load() },
		NATSConnected: func() bool {
			f := s.connected.Load()
			return f != nil && (*f)()
		},
		Canary: func(ctx context.Context) error {
			e := s.engine.Load()
			if e == nil {
				return errors.New("engine not loaded")
			}
			return e.Canary(ctx)
		},
	}
}

// serve is the whole service: health server, NATS, the objects check,
// engine (warm-up before ready) and, on each connection, the fleet
// membership and the worker (consumer, request-reply service, fetch loop).
// It returns nil after a drain when ctx ends (SIGTERM), and an error when
// something needed fails or the worker stops on its own for a reason a new
// connection would not cure. A connection the server closes in a way
// nats.go does not come back from (an -ERR such as a too-long control
// line) is replaced: serve dials again and rebuilds what ran on it; jobs
// the old connection held come back after AckWait.
func serve(ctx context.Context, log *slog.Logger, c serveConfig) error {
	warnUnscoped(log, c.Replies)
	prom, stopTelemetry, err := startTelemetry(ctx)
	if err != nil {
		return err
	}
	defer stopTelemetry()
	var live liveState
	metrics := prom.Metrics
	stopHTTP, err := startHTTP(ctx, log, c.HTTP, &live, prom.Handler())
	if err != nil {
		return err
	}
	defer stopHTTP()
	nc, err := jetstream.Connect(ctx, c.NATS)
	if err != nil {
		return err
	}
	defer func() { nc.Close() }()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if err := checkObjects(ctx, log, js, c.JetStream, c.Provision, nc.LastError); err != nil {
		return err
	}
	// The engine opens once, inside the fleet wiring (it takes a peer's
	// probe coefficients), and outlives the connections below.
	e, sm, err := openEngine(ctx, log, js, c.Engine, c.Fleet, c.JetStream)
	if err != nil {
		return err
	}
	defer e.Close()
	e.SetMetrics(metrics) // tokenize time, per-session runs, guard refusals
	live.engine.Store(e)
	live.loaded.Store(true)
	live.warmed.Store(true)
	quick := 0 // connections in a row that lasted less than a minute
	for first := true; ; first = false {
		start := time.Now()
		lost, err := serveOn(ctx, log, c, &live, prom, nc, js, e, sm, first)
		if !lost {
			return err
		}
		if quick++; time.Since(start) > time.Minute {
			quick = 1
		}
		log.Warn("nats connection closed by the server; connecting again", "err", nc.LastError())
		nc.Close()
		if nc, err = jetstream.Reconnect(ctx, c.NATS, quick); err != nil {
			if ctx.Err() != nil {
				return nil // stopped while the server was away: nothing is held
			}
			return err
		}
		if js, err = jetstream.New(nc); err != nil {
			return err
		}
	}
}

// serveOn runs the fleet membership and the worker on nc until ctx ends
// (it drains; lost is false) or the connection closes by itself (lost is
// true: the caller dials again). An error with lost false is one a new
// connection would not cure.
func serveOn(ctx context.Context, log *slog.Logger, c serveConfig, live *liveState, prom *export.Prometheus,
	nc *jetstream.Conn, js natsjs.JetStream, e *engine.Engine, sm string, first bool) (lost bool, err error) {
	connected := nc.IsConnected
	live.connected.Store(&connected)
	gone := func() bool { return nc.IsClosed() && ctx.Err() == nil }
	metrics := prom.Metrics
	// The fleet's emb reports the JIT guard's refusals as wants.
	emb, stop, err := joinFleet(ctx, log, js, e, sm, c.Engine, c.Fleet, c.JetStream)
	if err != nil {
		return gone(), err
	}
	stopFleet := sync.OnceFunc(stop)
	defer stopFleet()
	wc := c.worker(log, metrics, emb, e.ModelID(), e.MaxTokens())
	wc.Consumer.MaxResultBytes = c.resultLimit(e)
	w, err := jetstream.StartWorker(ctx, nc, wc)
	if errors.Is(err, consumer.ErrConfig) {
		return false, fmt.Errorf("%w: %w", errUsage, err)
	} else if err != nil {
		return gone(), err
	}
	defer observe(log, metrics, w, e, c.Heartbeat)()
	// The HTTP API hands its calls to this process's job loop directly:
	// the embedder user needs no producer's grants to request the service
	// and no reply inbox. It stops before the worker, and is started again
	// with the worker of a new connection.
	stopAPI, err := startAPI(ctx, log, c.API, w, nc.MaxPayload(), prom.Registerer())
	if err != nil {
		grace, cancel := context.WithTimeout(context.Background(), c.Grace)
		defer cancel()
		_ = w.Stop(grace)
		return false, err
	}
	defer stopAPI()
	if first {
		log.Info("ready", "model", e.ModelID(), "nats", jetstream.RedactURL(nc.ConnectedUrl()), "stream", c.JetStream.Jobs.Name,
			"consumer", c.JetStream.Consumer.Name, "endpoint", jetstream.EndpointSubject, "version", version,
			"memory_budget", c.Engine.budgetNote, "attention", c.Engine.attentionNote, "malloc", mallocenv.Mode(), "max_result_bytes", wc.Consumer.MaxResultBytes)
	} else {
		log.Info("serving again on a new connection", "nats", jetstream.RedactURL(nc.ConnectedUrl()))
	}
	select {
	case <-ctx.Done():
		log.Info("stopping: draining in-flight jobs", "grace", c.Grace)
	case <-w.Stopped():
	case <-e.Fatal():
		return false, stopFatal(log, live, w, stopFleet, nc, e)
	}
	if gone() {
		<-w.Stopped()
		stopFleet()
		st := w.Consumer().Stats()
		log.Info("connection lost: the jobs it held come back after ack-wait", "jobs", st.Jobs, "texts", st.Texts)
		return true, nil
	}
	live.draining.Store(true)
	stopAPI()
	grace, cancel := context.WithTimeout(context.Background(), c.Grace)
	defer cancel()
	_ = w.Stop(grace)
	stopFleet()
	if err := drainConn(nc); err != nil {
		log.Warn("nats drain", "err", err)
	}
	st := w.Consumer().Stats()
	log.Info("stopped", "jobs", st.Jobs, "texts", st.Texts)
	return false, w.Err()
}

// stopFatal ends serving after a fatal engine-build error: not ready at
// once, every in-flight and buffered job NAKed without delay (no grace:
// the engine can finish nothing), the fleet left, and an error wrapping
// engine.ErrFatal, for which main exits non-zero so that the orchestrator
// replaces the process.
func stopFatal(log *slog.Logger, live *liveState, w *jetstream.Worker, stopFleet func(), nc *jetstream.Conn, e *engine.Engine) error {
	live.fatal.Store(true)
	err := e.FatalErr()
	log.Error("fatal engine error: giving the jobs back and exiting", "err", err)
	now, cancel := context.WithCancel(context.Background())
	cancel()
	_ = w.Stop(now)
	stopFleet()
	if err := drainConn(nc); err != nil {
		log.Warn("nats drain", "err", err)
	}
	return fmt.Errorf("%w: %w", engine.ErrFatal, err)
}

// worker is the worker's config: by default the patience window ends
// once the queued jobs would fill every session's run once.
func (c serveConfig) worker(log *slog.Logger, metrics *telemetry.Metrics, emb consumer.Embedder, model string, maxTokens int) jetstream.WorkerConfig {
	gather := c.gatherTokens()
	return jetstream.WorkerConfig{
		Config: c.JetStream,
		Consumer: consumer.Config{Replies: c.Replies, Patience: c.Patience, MaxBatchTokens: gather, InFlightTokens: c.InFlightTokens, InteractiveTokens: c.InteractiveTokens,
			InteractiveTenants: c.InteractiveTenants, Logger: log, Metrics: metrics},
		Embedder: emb,
		Blobs:    c.Blobs,
		Service: jetstream.ServiceOptions{Version: version, Logger: log, Tokenizer: c.Engine.tokenizeFunc(maxTokens),
			Metadata: map[string]string{"model": model,
				jetstream.MetaInteractiveTokens: strconv.Itoa(c.InteractiveTokens), jetstream.MetaMaxTokens: strconv.Itoa(maxTokens)}},
		PrefetchMax: c.PrefetchMax,
		Pull:        []jetstream.PullOption{jetstream.PrefetchBytes(c.PrefetchBytes)},
		Grace:       c.Grace,
		Logger:      log,
	}
}

// checkObjects makes sure the server's objects exist (mode off), or
// creates the missing ones (create); drift is a warning per object naming
// each field, never applied. lastErr is the connection's last error: a
// request the user may not make only times out, and the server's reason
// comes separately.
func checkObjects(ctx context.Context, log *slog.Logger, js natsjs.JetStream, cfg jetstream.Config, mode jetstream.Mode, lastErr func() error) error {
	if mode == skipProvision {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	r, err := jetstream.Provision(ctx, js, cfg, jetstream.WithMode(mode), jetstream.ServerTuning())
	for _, o := range r.Outcomes {
		switch o.Action {
		case jetstream.Created:
			log.Info("created", "object", o.Kind, "name", o.Name)
		case jetstream.Drifted, jetstream.Refused:
			log.Warn("server config differs from the flags; not applied (run `jetembed provision` to change it)",
				"object", o.Kind, "name", o.Name, "fields", o.Fields(), "changes", fmt.Sprint(o.Changes))
		case jetstream.Missing:
			log.Error("missing", "object", o.Kind, "name", o.Name)
		}
	}
	switch {
	case errors.Is(err, jetstream.ErrMissing):
		return fmt.Errorf("%w: %w: create them with `jetembed provision` (as a user allowed to), or start with --provision=create", errConfig, err)
	case errors.Is(err, jetstream.ErrDrift):
		return nil // warned above: serve runs with what the server has
	case err != nil && lastErr() != nil:
		return fmt.Errorf("%w: checking the server's objects: %w (the server said: %v)", errConfig, err, lastErr())
	case err != nil:
		return fmt.Errorf("%w: checking the server's objects: %w", errConfig, err)
	}
	return nil
}

// drainConn drains the NATS connection (flushing the last ACKs) and waits
// for it to close.
func drainConn(nc interface {
	Drain() error
	IsClosed() bool
}) error {
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
