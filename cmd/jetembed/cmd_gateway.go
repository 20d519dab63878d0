package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/gateway"
	"github.com/jetembed/jetembed/internal/telemetry"
	"github.com/jetembed/jetembed/internal/telemetry/export"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

func init() {
	register(command{
		name:    "gateway",
		summary: "serve the OpenAI-compatible HTTP embeddings API in front of the fleet (embed.v1.embed)",
		run:     runGateway,
	})
}

// gatewayFlags are the HTTP API's flags: the whole of `gateway`, and
// `serve`/`dev` with --http-api.
type gatewayFlags struct {
	listen          *string
	apiKey          *string
	tlsCert, tlsKey *string
	maxBody         *int
	maxInputs       *int
	jobTexts, jobB  *int
	maxConcurrent   *int
	colbertBytes    *int
	timeout         *time.Duration
}

// addGatewayFlags adds the API flags; listenFlag names the address flag
// (--listen in gateway, --http-api in serve and dev, where it is off by
// default).
func addGatewayFlags(fs *flagSet, listenFlag, listenDefault string) *gatewayFlags {
	listenUsage := "address of the HTTP embeddings API (/v1/embeddings, /v1/sparse-embeddings, /v1/embeddings:both, /v1/models, /health)"
	if listenDefault == "" {
		listenUsage += " in this process (empty: off)"
	}
	return &gatewayFlags{
		listen:        fs.String(listenFlag, listenDefault, listenUsage),
		apiKey:        fs.String("api-key", "", "bearer token the HTTP API requires on every call but /health (empty: no auth; prefer the environment variable)"),
		tlsCert:       fs.String("tls-cert", "", "PEM certificate of the HTTP API (HTTPS; with --tls-key)"),
		tlsKey:        fs.String("tls-key", "", "PEM key of --tls-cert"),
		maxBody:       fs.Int("api-max-body-bytes", gateway.DefaultMaxBodyBytes, "largest HTTP API request body; larger is refused with 413"),
		maxInputs:     fs.Int("api-max-inputs", gateway.DefaultMaxInputs, "most inputs in one HTTP API call; more are refused with 400"),
		jobTexts:      fs.Int("api-job-texts", gateway.DefaultJobTexts, "most texts in one fleet job; a larger call is split into jobs sent concurrently and reassembled in order"),
		jobB:          fs.Int("api-job-bytes", 0, "most bytes of text in one fleet job (0: 512 KiB or half the NATS server's max_payload, the smaller)"),
		maxConcurrent: fs.Int("api-max-concurrent", gateway.DefaultMaxConcurrent, "HTTP API calls in flight at once; beyond, 429 with Retry-After (with --api-max-body-bytes, this bounds the API's memory)"),
		colbertBytes:  fs.Int("api-colbert-bytes", gateway.DefaultColBERTBytes, "most bytes of text in one HTTP API call that asks for colbert vectors (about 4 KiB of answer a token); more is refused with 413"),
		timeout:       fs.Duration("api-timeout", gateway.DefaultTimeout, "bound on one HTTP API call, all its fleet jobs included; past it, 504"),
	}
}

func runGateway(ctx context.Context, args []string, io stdio) error {
	fs := newFlagSet("gateway", io)
	nf := addNATSFlags(fs)
	gf := addGatewayFlags(fs, "listen", gateway.DefaultListen)
	tenant := addTenantFlag(fs)
	ops := fs.String("http", "127.0.0.1:9091", "address of /healthz, /readyz and /metrics (empty: off)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	logFormat := fs.String("log-format", telemetry.LogAuto, "log format: auto (text on a terminal, else json), text or json")
	printCfg := fs.Bool("print-config", false, "print the effective value of every flag with its environment variable, and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if *printCfg {
		printConfig(fs, io)
		return nil
	}
	if *gf.listen == "" {
		return fmt.Errorf("%w: --listen is required", errUsage)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("%w: --log-level %q", errUsage, *logLevel)
	}
	log := telemetry.NewLogger(io.err, level, *logFormat)
	prom, err := export.NewPrometheus()
	if err != nil {
		return err
	}
	defer prom.Shutdown(context.Background())

	nc, err := jetstream.Connect(ctx, forTenant(nf.options(log), *tenant))
	if err != nil {
		return err
	}
	defer nc.Close()
	c, err := client.New(nc, client.WithTenant(*tenant))
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	gw, err := newGateway(log, gf, gatewayFleet{c, jetstream.ServicePinger(nc)}, nc.MaxPayload(), prom.Registerer())
	if err != nil {
		return err
	}
	opsCtx, stopOps := context.WithCancel(context.WithoutCancel(ctx))
	defer stopOps()
	if *ops != "" {
		ln, err := net.Listen("tcp", *ops)
		if err != nil {
			return fmt.Errorf("http: %w", err)
		}
		log.Info("http listening", "addr", ln.Addr().String())
		go func() {
			_ = telemetry.ServeListener(opsCtx, ln, telemetry.Health{NATSConnected: nc.IsConnected}, prom.Handler())
		}()
	}
	wait, err := serveGateway(ctx, log, gw, *gf.listen)
	if err != nil {
		return err
	}
	log.Info("ready", "nats", nc.ConnectedUrlRedacted(), "endpoint", c.Endpoint(), "version", version)
	return wait()
}

// apiFleet is what the HTTP API calls: the fleet, or this process's job
// loop.
type apiFleet interface {
	gateway.Requester
	gateway.Pinger
}

// newGateway builds the API server from its flags, in front of fleet; the
// server's max_payload bounds one fleet job.
func newGateway(log *slog.Logger, gf *gatewayFlags, fleet apiFleet, maxPayload int64, reg prometheus.Registerer) (*gateway.Server, error) {
	jobBytes := *gf.jobB
	if jobBytes <= 0 {
		jobBytes = int(min(gateway.DefaultJobBytes, max(maxPayload/2, 1024)))
	}
	gw, err := gateway.New(gateway.Config{
		Requester: fleet, Pinger: fleet,
		APIKey: *gf.apiKey, TLSCertFile: *gf.tlsCert, TLSKeyFile: *gf.tlsKey,
		MaxBodyBytes: int64(*gf.maxBody), MaxInputs: *gf.maxInputs,
		JobTexts: *gf.jobTexts, JobBytes: jobBytes, MaxConcurrent: *gf.maxConcurrent, ColBERTBytes: *gf.colbertBytes,
		Timeout: *gf.timeout, Logger: log, Registerer: reg,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	return gw, nil
}

// serveGateway listens on addr and serves gw until ctx ends; wait returns
// once the server has finished the calls in flight.
func serveGateway(ctx context.Context, log *slog.Logger, gw *gateway.Server, addr string) (wait func() error, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http api: %w", err)
	}
	scheme := "http"
	if gw.TLS() {
		scheme = "https"
	}
	log.Info("http api listening", "addr", ln.Addr().String(), "url", scheme+"://"+ln.Addr().String()+"/v1")
	done := make(chan error, 1)
	go func() { done <- gw.Serve(ctx, ln) }()
	return func() error { return <-done }, nil
}

// startAPI runs the HTTP API inside serve (--http-api), in front of the
// worker w itself; stop (idempotent) shuts it down, finishing its calls,
// before the worker stops. It does nothing when --http-api is empty.
func startAPI(ctx context.Context, log *slog.Logger, gf *gatewayFlags, w *jetstream.Worker, maxPayload int64, reg prometheus.Registerer) (stop func(), err error) {
	if *gf.listen == "" {
		return func() {}, nil
	}
	gw, err := newGateway(log, gf, localFleet{w}, maxPayload, reg)
	if err != nil {
		return nil, err
	}
	apiCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	wait, err := serveGateway(apiCtx, log, gw, *gf.listen)
	if err != nil {
		cancel()
		return nil, err
	}
	return sync.OnceFunc(func() {
		cancel()
		if err := wait(); err != nil {
			log.Warn("http api stop", "err", err)
		}
	}), nil
}

// gatewayFleet is the gateway's view of the fleet: request-reply through
// the producer client, liveness through the service's $SRV.INFO.
type gatewayFleet struct {
	client *client.Client
	ping   func(context.Context) (jetstream.ServiceMember, error)
}

func (f gatewayFleet) Request(ctx context.Context, job *schema.Job) (*schema.Result, error) {
	res, err := f.client.Request(ctx, job)
	if errors.Is(err, client.ErrNoService) {
		return nil, fmt.Errorf("%w: %w", gateway.ErrNoMember, err)
	}
	return res, err
}

// localFleet is the HTTP API's view of this process's own worker.
type localFleet struct{ w *jetstream.Worker }

func (f localFleet) Request(ctx context.Context, job *schema.Job) (*schema.Result, error) {
	return f.w.Request(ctx, job)
}

func (f localFleet) Ping(context.Context) (gateway.Member, error) {
	m := f.w.Member()
	return gateway.Member{ID: m.ID, Model: m.Model, Version: m.Version}, nil
}

func (f gatewayFleet) Ping(ctx context.Context) (gateway.Member, error) {
	m, err := f.ping(ctx)
	if errors.Is(err, jetstream.ErrNoService) {
		return gateway.Member{}, fmt.Errorf("%w: %w", gateway.ErrNoMember, err)
	}
	return gateway.Member{ID: m.ID, Model: m.Model, Version: m.Version}, err
}
