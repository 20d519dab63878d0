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
		summary: "serve the HTTP API (OpenAI, TEI, rerank) in front of the fleet (embed.v1.embed, embed.v1.rerank, embed.v1.tokenize)",
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
	maxConns        *int
	clientConns     *int
	clientCalls     *int
	headerTimeout   *time.Duration
	minBodyRate     *int
	bodyBudget      *int
	clientBodyB     *int
	allowWeakTLS    *bool
}

// addGatewayFlags adds the API flags; listenFlag names the address flag
// (--listen in gateway, --http-api in serve and dev, where it is off by
// default).
func addGatewayFlags(fs *flagSet, listenFlag, listenDefault string) *gatewayFlags {
	listenUsage := "address of the HTTP embeddings API (OpenAI /v1/embeddings, /v1/models, /v1/rerank; TEI /embed, /embed_sparse, /embed_all, /rerank, /tokenize, /info; /v1/sparse-embeddings, /v1/embeddings:both, /health)"
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
		maxConcurrent: fs.Int("api-max-concurrent", gateway.DefaultMaxConcurrent, "HTTP API calls in flight at once, counted once a call is authenticated and its body read; beyond, 429 gateway_busy with Retry-After"),
		maxConns:      fs.Int("api-max-conns", gateway.DefaultMaxConns, "open HTTP API connections, kept below the process's file limit (RLIMIT_NOFILE) less a reserve; at the cap an idle keep-alive connection is closed for a new one, with none idle the new one gets 503"),
		clientConns:   fs.Int("api-client-conns", 0, "open HTTP API connections of one client address (0: half of the connection cap, --api-max-conns as the file limit allows)"),
		clientCalls:   fs.Int("api-client-concurrent", 0, "HTTP API calls in progress (bodies being read included) of one client address; beyond, 429 client_busy (0: half of --api-max-concurrent)"),
		headerTimeout: fs.Duration("api-header-timeout", gateway.DefaultHeaderTimeout, "time to read an HTTP API request's headers; its body then has this much grace, after which every window of this length must bring --api-min-body-rate, else 408 body_timeout"),
		minBodyRate:   fs.Int("api-min-body-rate", gateway.DefaultMinBodyRate, "slowest an HTTP API request body may arrive, bytes a second over a sliding window of --api-header-timeout after its grace; at the connection cap, a connection whose body came slower on average for a second may be closed for a new one"),
		bodyBudget:    fs.Int("api-body-budget", gateway.DefaultBodyBudget, "bytes of all HTTP API request bodies being read at once, taken as the bytes arrive (not as Content-Length says); beyond, 429 gateway_busy (with --api-max-concurrent x --api-max-body-bytes, this bounds the API's memory)"),
		clientBodyB:   fs.Int("api-client-body-budget", 0, "bytes of HTTP API request bodies one client address may have being read at once; beyond, 429 client_busy; a client's first body always fits (0: a quarter of --api-body-budget, at least twice --api-max-body-bytes)"),
		allowWeakTLS:  fs.Bool("tls-allow-weak", false, "start HTTPS even with an expired or not yet valid certificate or an RSA key under 2048 bits (logged as an error at start)"),
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
	gw, err := newGateway(log, gf, gatewayFleet{c, nc}, nc.MaxPayload(), prom.Registerer())
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
	watchLink(ctx, gw, nc)
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
	gateway.Reranker
	gateway.Tokenizer
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
		APIKey: *gf.apiKey, TLSCertFile: *gf.tlsCert, TLSKeyFile: *gf.tlsKey, AllowWeakTLS: *gf.allowWeakTLS,
		MaxBodyBytes: int64(*gf.maxBody), MaxInputs: *gf.maxInputs,
		JobTexts: *gf.jobTexts, JobBytes: jobBytes, MaxConcurrent: *gf.maxConcurrent, ColBERTBytes: *gf.colbertBytes,
		MaxConns: *gf.maxConns, ClientConns: *gf.clientConns, ClientConcurrent: *gf.clientCalls,
		HeaderTimeout: *gf.headerTimeout, MinBodyRate: *gf.minBodyRate, BodyBudget: int64(*gf.bodyBudget),
		ClientBodyBudget: int64(*gf.clientBodyB),
		Timeout:          *gf.timeout, Logger: log, Registerer: reg,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	return gw, nil
}

// watchLink tells gw whether nc is connected, from nc's status changes
// (re-reading the status, as nats.go drops events when the channel is
// full, and every second besides), until ctx ends.
func watchLink(ctx context.Context, gw *gateway.Server, nc *jetstream.Conn) {
	ch := nc.StatusChanged()
	gw.SetConnected(nc.IsConnected())
	go func() {
		defer nc.RemoveStatusListener(ch)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ch:
			case <-t.C:
			}
			gw.SetConnected(nc.IsConnected())
		}
	}()
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
	// No link to watch: the fleet is this process, whether NATS is up or
	// not.
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
// the producer client (embed, rerank and tokenize), liveness and capacity
// through the service's info endpoint of its tenant (embed.v1.info.<tenant>,
// which answers only inside the tenant's space: $SRV is for operators).
type gatewayFleet struct {
	client *client.Client
	nc     *jetstream.Conn
}

// noMember marks "nobody serves the endpoint" as the gateway knows it.
func noMember(err error) error {
	if errors.Is(err, client.ErrNoService) || errors.Is(err, jetstream.ErrNoService) {
		return fmt.Errorf("%w: %w", gateway.ErrNoMember, err)
	}
	return err
}

func (f gatewayFleet) Request(ctx context.Context, job *schema.Job) (*schema.Result, error) {
	res, err := f.client.Request(ctx, job)
	return res, noMember(err)
}

func (f gatewayFleet) Rerank(ctx context.Context, req *schema.RerankRequest) (*schema.RerankResult, error) {
	res, err := f.client.RerankRequest(ctx, req)
	return res, noMember(err)
}

func (f gatewayFleet) Tokenize(ctx context.Context, req *schema.TokenizeRequest) (*schema.TokenizeResult, error) {
	res, err := f.client.TokenizeRequest(ctx, req)
	return res, noMember(err)
}

// localFleet is the HTTP API's view of this process's own worker.
type localFleet struct{ w *jetstream.Worker }

func (f localFleet) Request(ctx context.Context, job *schema.Job) (*schema.Result, error) {
	return f.w.Request(ctx, job)
}

func (f localFleet) Rerank(ctx context.Context, req *schema.RerankRequest) (*schema.RerankResult, error) {
	return f.w.Rerank(ctx, req)
}

func (f localFleet) Tokenize(ctx context.Context, req *schema.TokenizeRequest) (*schema.TokenizeResult, error) {
	return f.w.Tokenize(ctx, req)
}

func (f localFleet) Ping(context.Context) (gateway.Member, error) {
	return gatewayMember(f.w.Member()), nil
}

func (f gatewayFleet) Ping(ctx context.Context) (gateway.Member, error) {
	m, err := jetstream.PingTenant(ctx, f.nc, f.client.Tenant())
	if err != nil {
		return gateway.Member{}, noMember(err)
	}
	return gatewayMember(m), nil
}

// memberLinger is how long the gateway waits for more members' answers
// after the first.
const memberLinger = 100 * time.Millisecond

func (f gatewayFleet) Members(ctx context.Context) ([]gateway.Member, error) {
	ms, err := jetstream.TenantMembers(ctx, f.nc, f.client.Tenant(), memberLinger)
	if err != nil {
		return nil, noMember(err)
	}
	out := make([]gateway.Member, len(ms))
	for i, m := range ms {
		out[i] = gatewayMember(m)
	}
	return out, nil
}

func gatewayMember(m jetstream.ServiceMember) gateway.Member {
	return gateway.Member{ID: m.ID, Model: m.Model, Version: m.Version, InteractiveTokens: m.InteractiveTokens, MaxTokens: m.MaxTokens}
}
