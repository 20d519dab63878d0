package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

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
// engine ones. The consumer's ack wait and max deliver are the provisioning
// flags --ack-wait and --max-deliver: the consumer must agree with the
// JetStream consumer it reads.
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
	provision      *bool
	printConfig    *bool
	replyAllow     *string
	maxReplyBytes  *int
}

func addServeFlags(fs *flagSet) *serveFlags {
	return &serveFlags{
		patience:       fs.Duration("patience", consumer.DefaultPatience, "how long a batch waits for more jobs to pack with its first"),
		gatherTokens:   fs.Int("gather-tokens", 0, "estimated tokens that end a batch's patience window early: the texts given to the engine at once (0: max-batch-tokens x sessions)"),
		inFlightTokens: fs.Int("in-flight-tokens", 0, "estimated tokens of the jobs this process holds; when full it stops pulling (0: 4 x gather-tokens)"),
		prefetchMax:    fs.Int("prefetch-max", jetstream.DefaultPrefetchMax, "most jobs buffered ahead of the consumer; the prefetch adapts below it to finish within ack-wait/4"),
		prefetchBytes:  fs.Int("prefetch-bytes", jetstream.DefaultPrefetchBytes, "byte cap of the jobs buffered ahead of the consumer: pull requests ask for no more than fits (raised to the server's max payload)"),
		grace:          fs.Duration("grace", 30*time.Second, "on SIGTERM, how long in-flight jobs may take to finish before they are NAKed"),
		http:           fs.String("http", telemetry.DefaultAddr, "address of /healthz, /readyz and /metrics (empty: off)"),
		logLevel:       fs.String("log-level", "info", "log level: debug, info, warn or error"),
		logFormat:      fs.String("log-format", telemetry.LogAuto, "log format: auto (text on a terminal, else json), text or json"),
		heartbeat:      fs.Duration("heartbeat", 30*time.Second, "period of the heartbeat log line (0: none)"),
		provision:      fs.Bool("provision", true, "create or update the streams, the consumer and the KV bucket at start"),
		printConfig:    fs.Bool("print-config", false, "print the effective value of every flag with its environment variable, and exit"),
		replyAllow:     fs.String("reply-allow", strings.Join(schema.DefaultReplyAllow(), ","), "subject patterns a job's reply subject must match, comma separated; $ subjects and the jobs, DLQ and service subjects are always refused (bad_reply)"),
		maxReplyBytes:  fs.Int("max-reply-bytes", schema.DefaultMaxReplyBytes, "longest reply subject a result is sent to, in bytes (at most 1024)"),
	}
}

func runServe(ctx context.Context, args []string, io stdio) error {
	fs := newFlagSet("serve", io)
	nf := addNATSFlags(fs)
	pf := addProvisionFlags(fs)
	ef := addEngineFlags(fs, true)
	ff := addFleetFlags(fs)
	sf := addServeFlags(fs)
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
	var level slog.Level
	if err := level.UnmarshalText([]byte(*sf.logLevel)); err != nil {
		return fmt.Errorf("%w: --log-level %q", errUsage, *sf.logLevel)
	}
	log := telemetry.NewLogger(io.err, level, *sf.logFormat)
	cfg, err := pf.config()
	if err != nil {
		return err
	}
	return serve(ctx, log, nf.options(log), cfg, ef, ff, sf)
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
		strings.Contains(name, "secret")
}

// liveState is what /readyz asks while the process starts and runs.
type liveState struct {
	loaded, warmed atomic.Bool
	// draining turns /readyz to 503 from the first moment of a shutdown,
	// so load balancers and Kubernetes route no new work here meanwhile.
	draining  atomic.Bool
	connected atomic.Pointer[func() bool]
	engine    atomic.Pointer[engine.Engine]
}

func (s *liveState) health() telemetry.Health {
	return telemetry.Health{
		ModelsLoaded: s.loaded.Load,
		WarmedUp:     s.warmed.Load,
		Draining:     s.draining.Load,
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

// serve is the whole service: health server, NATS, provisioning, engine
// (warm-up before ready), consumer, request-reply service and fetch loop.
// It returns nil after a drain when ctx ends (SIGTERM), and an error when
// something needed fails at start; a connection the server closes is
// replaced (see [session]).
func serve(ctx context.Context, log *slog.Logger, no jetstream.Options, cfg jetstream.Config, ef *engineFlags, ff *fleetFlags, sf *serveFlags) error {
	replies, err := sf.replyPolicy(cfg)
	if err != nil {
		return err
	}
	shutdownTracing, err := telemetry.SetupTracing(ctx, "jetembed", version)
	if err != nil {
		return err
	}
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdownTracing(c)
	}()
	metrics, err := telemetry.NewMetrics()
	if err != nil {
		return err
	}
	defer metrics.Shutdown(context.Background())

	var live liveState
	httpCtx, stopHTTP := context.WithCancel(context.WithoutCancel(ctx))
	httpDone := make(chan error, 1)
	if *sf.http != "" {
		ln, err := net.Listen("tcp", *sf.http)
		if err != nil {
			stopHTTP()
			return fmt.Errorf("http: %w", err)
		}
		log.Info("http listening", "addr", ln.Addr().String())
		go func() { httpDone <- telemetry.ServeListener(httpCtx, ln, live.health(), metrics) }()
	} else {
		httpDone <- nil
	}
	defer func() {
		stopHTTP()
		<-httpDone
	}()

	nc, err := jetstream.Connect(ctx, no)
	if err != nil {
		return err
	}
	defer func() { nc.Close() }()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if *sf.provision {
		r, err := jetstream.Provision(ctx, js, cfg)
		for _, o := range r.Outcomes {
			log.Info("provisioned", "object", o.Kind, "name", o.Name, "action", o.Action.String())
		}
		if err != nil {
			return fmt.Errorf("provision: %w", err)
		}
	}

	// The engine opens once, inside the fleet wiring: it takes a peer's
	// probe coefficients. It outlives the connections below.
	e, sm, err := openEngine(ctx, log, js, ef, ff, cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	live.engine.Store(e)
	live.loaded.Store(true)
	live.warmed.Store(true)

	// Only a signal or a configuration error ends serve. A connection the
	// server closed in a way nats.go does not come back from (an -ERR such
	// as a too-long control line) ends its session: serve dials a new one
	// and builds the fleet membership, consumer, service and fetch loop
	// again; jobs the old session held come back after AckWait.
	s := &session{log: log, cfg: cfg, replies: replies, e: e, sm: sm, ef: ef, ff: ff, sf: sf, metrics: metrics, live: &live}
	quick := 0 // sessions in a row that lasted less than a minute
	for first := true; ; first = false {
		start := time.Now()
		lost, err := s.run(ctx, nc, js, first)
		if !lost {
			return err
		}
		if quick++; time.Since(start) > time.Minute {
			quick = 1
		}
		log.Warn("nats connection closed by the server; connecting again", "err", nc.LastError())
		nc.Close()
		if nc, err = jetstream.Reconnect(ctx, no, quick); err != nil {
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

// drainAfter drains the consumer within the grace period and returns cause.
func drainAfter(log *slog.Logger, cons *consumer.Consumer, sf *serveFlags, cause error) error {
	ctx, cancel := context.WithTimeout(context.Background(), *sf.grace)
	defer cancel()
	if err := cons.Drain(ctx); err != nil {
		log.Warn("grace period over: unfinished jobs were NAKed", "err", err)
	}
	return cause
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
