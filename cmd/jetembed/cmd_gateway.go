package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/gateway"
	"github.com/jetembed/jetembed/internal/telemetry"
	"github.com/jetembed/jetembed/internal/telemetry/export"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/node"
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
	listen          string
	apiKey          string
	tlsCert, tlsKey string
	maxBody         int
	maxInputs       int
	jobTexts, jobB  int
	maxConcurrent   int
	colbertBytes    int
	timeout         time.Duration
	maxConns        int
	clientConns     int
	clientCalls     int
	headerTimeout   time.Duration
	minBodyRate     int
	bodyBudget      int
	clientBodyB     int
	allowWeakTLS    bool
}

// addGatewayFlags adds the API flags; listenFlag names the address flag
// (--listen in gateway, --http-api in serve and dev, where it is off by
// default).
func addGatewayFlags(fs *flagSet, listenFlag, listenDefault string) *gatewayFlags {
	listenUsage := "address of the HTTP embeddings API (OpenAI /v1/embeddings, /v1/models, /v1/rerank; TEI /embed, /embed_sparse, /embed_all, /rerank, /tokenize, /info; /v1/sparse-embeddings, /v1/embeddings:both, /health)"
	if listenDefault == "" {
		listenUsage += " in this process (empty: off)"
	}
	f := new(gatewayFlags)
	fs.StringVar(&f.listen, listenFlag, listenDefault, listenUsage)
	fs.StringVar(&f.apiKey, "api-key", "", "bearer token the HTTP API requires on every call but /health (empty: no auth; prefer the environment variable)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "PEM certificate of the HTTP API (HTTPS; with --tls-key)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM key of --tls-cert")
	fs.IntVar(&f.maxBody, "api-max-body-bytes", gateway.DefaultMaxBodyBytes, "largest HTTP API request body; larger is refused with 413")
	fs.IntVar(&f.maxInputs, "api-max-inputs", gateway.DefaultMaxInputs, "most inputs in one HTTP API call; more are refused with 400")
	fs.IntVar(&f.jobTexts, "api-job-texts", gateway.DefaultJobTexts, "most texts in one fleet job; a larger call is split into jobs sent concurrently and reassembled in order")
	fs.IntVar(&f.jobB, "api-job-bytes", 0, "most bytes of text in one fleet job (0: 512 KiB or half the NATS server's max_payload, the smaller)")
	fs.IntVar(&f.maxConcurrent, "api-max-concurrent", gateway.DefaultMaxConcurrent, "HTTP API calls in flight at once, counted once a call is authenticated and its body read; beyond, 429 gateway_busy with Retry-After")
	fs.IntVar(&f.maxConns, "api-max-conns", gateway.DefaultMaxConns, "open HTTP API connections, kept below the process's file limit (RLIMIT_NOFILE) less a reserve; at the cap an idle keep-alive connection is closed for a new one, with none idle the new one gets 503")
	fs.IntVar(&f.clientConns, "api-client-conns", 0, "open HTTP API connections of one client address (0: half of the connection cap, --api-max-conns as the file limit allows)")
	fs.IntVar(&f.clientCalls, "api-client-concurrent", 0, "HTTP API calls in progress (bodies being read included) of one client address; beyond, 429 client_busy (0: half of --api-max-concurrent)")
	fs.DurationVar(&f.headerTimeout, "api-header-timeout", gateway.DefaultHeaderTimeout, "time to read an HTTP API request's headers; its body then has this much grace, after which every window of this length must bring --api-min-body-rate, else 408 body_timeout")
	fs.IntVar(&f.minBodyRate, "api-min-body-rate", gateway.DefaultMinBodyRate, "slowest an HTTP API request body may arrive, bytes a second over a sliding window of --api-header-timeout after its grace; at the connection cap, a connection whose body came slower on average for a second may be closed for a new one")
	fs.IntVar(&f.bodyBudget, "api-body-budget", gateway.DefaultBodyBudget, "bytes of all HTTP API request bodies being read at once, taken as the bytes arrive (not as Content-Length says); beyond, 429 gateway_busy (with --api-max-concurrent x --api-max-body-bytes, this bounds the API's memory)")
	fs.IntVar(&f.clientBodyB, "api-client-body-budget", 0, "bytes of HTTP API request bodies one client address may have being read at once; beyond, 429 client_busy; a client's first body always fits (0: a quarter of --api-body-budget, at least twice --api-max-body-bytes)")
	fs.BoolVar(&f.allowWeakTLS, "tls-allow-weak", false, "start HTTPS even with an expired or not yet valid certificate or an RSA key under 2048 bits (logged as an error at start)")
	fs.IntVar(&f.colbertBytes, "api-colbert-bytes", gateway.DefaultColBERTBytes, "most bytes of text in one HTTP API call that asks for colbert vectors (about 4 KiB of answer a token); more is refused with 413")
	fs.DurationVar(&f.timeout, "api-timeout", gateway.DefaultTimeout, "bound on one HTTP API call, all its fleet jobs included; past it, 504")
	return f
}

// config is the API's configuration but for its fleet (Requester,
// Pinger), logger and metrics registry; a zero JobBytes is sized by the
// NATS server's max payload once connected.
func (gf *gatewayFlags) config() gateway.Config {
	return gateway.Config{
		APIKey: gf.apiKey, TLSCertFile: gf.tlsCert, TLSKeyFile: gf.tlsKey, AllowWeakTLS: gf.allowWeakTLS,
		MaxBodyBytes: int64(gf.maxBody), MaxInputs: gf.maxInputs,
		JobTexts: gf.jobTexts, JobBytes: gf.jobB, MaxConcurrent: gf.maxConcurrent, ColBERTBytes: gf.colbertBytes,
		MaxConns: gf.maxConns, ClientConns: gf.clientConns, ClientConcurrent: gf.clientCalls,
		HeaderTimeout: gf.headerTimeout, MinBodyRate: gf.minBodyRate, BodyBudget: int64(gf.bodyBudget),
		ClientBodyBudget: int64(gf.clientBodyB),
		Timeout:          gf.timeout,
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
	if gf.listen == "" {
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
	fleet := node.NewGatewayFleet(c)
	gc := gf.config()
	gc.Requester, gc.Pinger, gc.Logger, gc.Registerer = fleet, fleet, log, prom.Registerer()
	if gc.JobBytes <= 0 {
		gc.JobBytes = gateway.JobBytesFor(nc.MaxPayload())
	}
	gw, err := gateway.New(gc)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
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
	node.WatchLink(ctx, gw, nc)
	wait, err := node.ServeGateway(ctx, log, gw, gf.listen)
	if err != nil {
		return err
	}
	log.Info("ready", "nats", nc.ConnectedUrlRedacted(), "endpoint", c.Endpoint(), "version", version)
	return wait()
}
