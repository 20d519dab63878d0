package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
	"github.com/jetembed/jetembed/telemetry"
)

func init() {
	register(command{
		name:    "serve",
		summary: "consume embedding jobs from NATS JetStream and answer embed.v1.embed requests",
		run:     runServe,
	})
}

// serveFlags are the flags of serve beyond the NATS, provisioning and
// engine ones. The consumer's ack wait, max deliver, backoff and max ack
// pending are not among them: they are the server's (see `provision`).
type serveFlags struct {
	patience       *time.Duration
	gatherTokens   *int
	inFlightTokens *int
	prefetchMax    *int
	prefetchBytes  *int
	grace          *time.Duration
	http           *string
	logLevel       *string
	logFormat      *string
	heartbeat      *time.Duration
	provision      *string
	blobs          *bool
	printConfig    *bool
	replyAllow     *string
	maxReplyBytes  *int
	api            *gatewayFlags
}

// addServeFlags defines serve's flags; provision is the default of
// --provision (off for serve, create for dev).
func addServeFlags(fs *flagSet, provision string) *serveFlags {
	return &serveFlags{
		patience:       fs.Duration("patience", consumer.DefaultPatience, "how long bulk jobs wait before they go to the engine, so its packer has more texts to choose from (interactive jobs wait none)"),
		gatherTokens:   fs.Int("gather-tokens", 0, "estimated tokens of queued jobs that end the patience window early (0: max-batch-tokens x sessions)"),
		inFlightTokens: fs.Int("in-flight-tokens", 0, "estimated tokens of the bulk jobs this process holds; when full it stops pulling (0: 4 x gather-tokens; interactive jobs have a budget of their own)"),
		prefetchMax:    fs.Int("prefetch-max", jetstream.DefaultPrefetchMax, "most jobs buffered ahead of the consumer (and never more than the server's max ack pending); the prefetch adapts below it to finish within ack-wait/4"),
		prefetchBytes:  fs.Int("prefetch-bytes", jetstream.DefaultPrefetchBytes, "byte cap of the jobs buffered ahead of the consumer: pull requests ask for no more than fits (raised to the server's max payload)"),
		grace:          fs.Duration("grace", 30*time.Second, "on SIGTERM, how long in-flight jobs may take to finish before they are NAKed"),
		http:           fs.String("http", telemetry.DefaultAddr, "address of /healthz, /readyz and /metrics (empty: off)"),
		logLevel:       fs.String("log-level", "info", "log level: debug, info, warn or error"),
		logFormat:      fs.String("log-format", telemetry.LogAuto, "log format: auto (text on a terminal, else json), text or json"),
		heartbeat:      fs.Duration("heartbeat", 30*time.Second, "period of the heartbeat log line (0: none)"),
		provision:      fs.String("provision", provision, "at start, off: check that the streams, the consumer and the KV bucket exist (exit if not); create: also create what is missing. Nothing existing is ever changed: that is jetembed provision"),
		blobs:          fs.Bool("blobs", true, "store results over the server's max payload in the blobs bucket and reply with a reference (false: reply result_too_large)"),
		printConfig:    fs.Bool("print-config", false, "print the effective value of every flag with its environment variable, and exit"),
		replyAllow:     fs.String("reply-allow", strings.Join(schema.DefaultReplyAllow(), ","), "subject patterns a job's reply subject must match, comma separated; $ subjects and the jobs, DLQ and service subjects are always refused (bad_reply)"),
		maxReplyBytes:  fs.Int("max-reply-bytes", schema.DefaultMaxReplyBytes, "longest reply subject a result is sent to, in bytes (at most 1024)"),
		api:            addGatewayFlags(fs, "http-api", ""),
	}
}

// serveConfig is everything serve runs with, parsed from the flags.
type serveConfig struct {
	NATS      jetstream.Options
	JetStream jetstream.Config
	// Provision is how serve treats the server's objects at start:
	// jetstream.ModeCheck (off) or ModeCreate (create); skipProvision
	// when the caller (dev) already did.
	Provision jetstream.Mode
	Engine    *engineFlags
	Fleet     *fleetFlags

	Replies schema.ReplyPolicy
	// Blobs stores results over the max payload in EMBED_BLOBS.
	Blobs bool

	Patience, Grace, Heartbeat   time.Duration
	GatherTokens, InFlightTokens int
	PrefetchMax, PrefetchBytes   int
	HTTP                         string
	LogLevel                     slog.Level
	LogFormat                    string
	// API is the HTTP API's flags (--http-api, off when empty).
	API *gatewayFlags
}

// skipProvision is a [serveConfig.Provision] that checks nothing.
const skipProvision jetstream.Mode = -1

// provisionMode parses --provision.
func provisionMode(s string) (jetstream.Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "off", "false":
		return jetstream.ModeCheck, nil
	case "create":
		return jetstream.ModeCreate, nil
	case "true", "on", "apply":
		return 0, fmt.Errorf("%w: --provision=%s: serve no longer creates or updates the server's objects; run `jetembed provision` (as a user allowed to), then serve with --provision=off, or --provision=create to create only what is missing", errUsage, s)
	}
	return 0, fmt.Errorf("%w: --provision %q: want off or create", errUsage, s)
}

// config gathers the parsed flags into one [serveConfig].
func (sf *serveFlags) config(no jetstream.Options, cfg jetstream.Config, ef *engineFlags, ff *fleetFlags) (serveConfig, error) {
	c := serveConfig{NATS: no, JetStream: cfg, Engine: ef, Fleet: ff,
		Patience: *sf.patience, Grace: *sf.grace, Heartbeat: *sf.heartbeat,
		GatherTokens: *sf.gatherTokens, InFlightTokens: *sf.inFlightTokens, PrefetchMax: *sf.prefetchMax,
		PrefetchBytes: *sf.prefetchBytes,
		HTTP:          *sf.http, LogFormat: *sf.logFormat, Blobs: *sf.blobs, API: sf.api}
	if err := c.LogLevel.UnmarshalText([]byte(*sf.logLevel)); err != nil {
		return c, fmt.Errorf("%w: --log-level %q", errUsage, *sf.logLevel)
	}
	var err error
	if c.Replies, err = sf.replyPolicy(cfg); err != nil {
		return c, err
	}
	c.Provision, err = provisionMode(*sf.provision)
	return c, err
}

func runServe(ctx context.Context, args []string, io stdio) error {
	fs := newFlagSet("serve", io)
	nf := addNATSFlags(fs)
	pf := addProvisionFlags(fs, false)
	ef := addEngineFlags(fs, true)
	ff := addFleetFlags(fs)
	sf := addServeFlags(fs, "off")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if *sf.printConfig {
		printConfig(fs, io)
		return nil
	}
	cfg, err := pf.config()
	if err != nil {
		return err
	}
	c, err := sf.config(jetstream.Options{}, cfg, ef, ff)
	if err != nil {
		return err
	}
	log := telemetry.NewLogger(io.err, c.LogLevel, c.LogFormat)
	c.NATS = nf.options(log)
	return serve(ctx, log, c)
}

// printConfig prints every flag's effective value (flag, environment, or
// default) with its environment variable; secrets are masked: the values of
// password and token flags, and the credentials of any URL.
func printConfig(fs *flagSet, io stdio) {
	for _, b := range fs.bindings {
		v := fs.Lookup(b.Flag).Value.String()
		if v != "" && secretFlag(b.Flag) {
			v = "<set>"
		}
		fmt.Fprintf(io.out, "--%s=%s\t%s\n", b.Flag, jetstream.RedactURLs(v), b.Env)
	}
}

// secretFlag reports whether a flag's value is itself a secret (not a path
// to one: --nats-creds and --nats-nkey name files and print as they are).
func secretFlag(name string) bool {
	return strings.Contains(name, "password") || strings.Contains(name, "token") && strings.HasPrefix(name, "nats") ||
		strings.Contains(name, "secret") || name == "api-key"
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
	metrics, stopTelemetry, err := startTelemetry(ctx)
	if err != nil {
		return err
	}
	defer stopTelemetry()
	var live liveState
	stopHTTP, err := startHTTP(ctx, log, c.HTTP, &live, metrics)
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
		lost, err := serveOn(ctx, log, c, &live, metrics, nc, js, e, sm, first)
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
func serveOn(ctx context.Context, log *slog.Logger, c serveConfig, live *liveState, metrics *telemetry.Metrics,
	nc *jetstream.Conn, js natsjs.JetStream, e *engine.Engine, sm string, first bool) (lost bool, err error) {
	connected := nc.IsConnected
	live.connected.Store(&connected)
	gone := func() bool { return nc.IsClosed() && ctx.Err() == nil }
	// The fleet's emb reports the JIT guard's refusals as wants.
	emb, stop, err := joinFleet(ctx, log, js, e, sm, c.Engine, c.Fleet, c.JetStream)
	if err != nil {
		return gone(), err
	}
	stopFleet := sync.OnceFunc(stop)
	defer stopFleet()
	w, err := jetstream.StartWorker(ctx, nc, c.worker(log, metrics, emb, e.ModelID()))
	if errors.Is(err, consumer.ErrConfig) {
		return false, fmt.Errorf("%w: %w", errUsage, err)
	} else if err != nil {
		return gone(), err
	}
	defer observe(log, metrics, w, e, c.Heartbeat)()
	// The HTTP API reaches this process's service and its peers through
	// NATS, as a separate gateway would; it stops before the worker, and
	// is started again on a new connection.
	stopAPI, err := startAPI(ctx, log, c.API, nc, metrics)
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
			"memory_budget", c.Engine.budgetNote)
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
func (c serveConfig) worker(log *slog.Logger, metrics *telemetry.Metrics, emb consumer.Embedder, model string) jetstream.WorkerConfig {
	gather := c.GatherTokens
	if gather <= 0 {
		gather = *c.Engine.maxBatchTokens
		if gather <= 0 {
			gather = consumer.DefaultMaxBatchTokens
		}
		gather *= max(*c.Engine.sessions, 1)
	}
	return jetstream.WorkerConfig{
		Config: c.JetStream,
		Consumer: consumer.Config{Replies: c.Replies, Patience: c.Patience, MaxBatchTokens: gather, InFlightTokens: c.InFlightTokens,
			Logger: log, Metrics: metrics},
		Embedder:    emb,
		Blobs:       c.Blobs,
		Service:     jetstream.ServiceOptions{Version: version, Metadata: map[string]string{"model": model}, Logger: log},
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

// startTelemetry sets up tracing and the metrics; stop flushes both.
func startTelemetry(ctx context.Context) (*telemetry.Metrics, func(), error) {
	shutdownTracing, err := telemetry.SetupTracing(ctx, "jetembed", version)
	if err != nil {
		return nil, nil, err
	}
	metrics, err := telemetry.NewMetrics()
	if err != nil {
		return nil, nil, err
	}
	return metrics, func() {
		metrics.Shutdown(context.Background())
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdownTracing(c)
	}, nil
}

// startHTTP serves /healthz, /readyz and /metrics on addr (none when
// empty); stop ends the server and waits for it.
func startHTTP(ctx context.Context, log *slog.Logger, addr string, live *liveState, metrics *telemetry.Metrics) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http: %w", err)
	}
	log.Info("http listening", "addr", ln.Addr().String())
	httpCtx, stopHTTP := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- telemetry.ServeListener(httpCtx, ln, live.health(), metrics) }()
	return func() {
		stopHTTP()
		<-done
	}, nil
}

// observe feeds the backlog gauges (from the worker's periodic consumer
// info: a consumer info request per scrape would put the server on the
// scrape path), the engine gauges and the heartbeat log line; the returned
// func stops it.
func observe(log *slog.Logger, metrics *telemetry.Metrics, w *jetstream.Worker, e *engine.Engine, heartbeat time.Duration) func() {
	bg, stop := context.WithCancel(context.Background())
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			recordEngineState(bg, metrics, e.Stats())
			select {
			case <-bg.Done():
				return
			case <-t.C:
			}
		}
	}()
	unobserve, err := metrics.ObserveConsumer(func(context.Context) (telemetry.ConsumerStats, error) {
		pending, ackPending := w.Backlog()
		return telemetry.ConsumerStats{Pending: pending, AckPending: ackPending}, nil
	})
	if err != nil {
		unobserve = func() error { return nil }
	}
	if heartbeat > 0 {
		go telemetry.Heartbeat(bg, log, heartbeat, func() telemetry.HeartbeatStats {
			st := w.Consumer().Stats()
			pending, _ := w.Backlog()
			return telemetry.HeartbeatStats{Texts: st.Texts, Tokens: st.Tokens, Jobs: st.Jobs, Pending: pending, InFlight: st.Held}
		})
	}
	return func() {
		stop()
		_ = unobserve()
	}
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

// recordEngineState copies the engine's warmed shapes and per-session
// breaker state (a session that is not loaded is open) into the gauges.
func recordEngineState(ctx context.Context, m *telemetry.Metrics, st engine.Stats) {
	m.SetWarmedShapes(ctx, len(st.Warmed))
	for _, s := range st.Sessions {
		m.SetBreakerOpen(ctx, strconv.Itoa(s.Index), !s.Loaded)
	}
}
