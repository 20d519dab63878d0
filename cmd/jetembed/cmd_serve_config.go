package main

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/ort"
	"github.com/jetembed/jetembed/gateway"
	"github.com/jetembed/jetembed/internal/mallocenv"
	"github.com/jetembed/jetembed/internal/telemetry"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/node"
	"github.com/jetembed/jetembed/schema"
)

// serve's flags and the configuration parsed from them.

// serveFlags are the flags of serve beyond the NATS, provisioning, engine
// and fleet ones. The consumer's ack wait, max deliver, backoff and max
// ack pending are not among them: they are the server's (see `provision`).
type serveFlags struct {
	inFlightTokens int
	interactive    int
	prefetchMax    int
	prefetchBytes  int
	grace          time.Duration
	http           string
	logLevel       string
	logFormat      string
	heartbeat      time.Duration
	provision      string
	blobs          bool
	cache          string
	maxResult      int
	printConfig    bool
	replyAllow     string
	maxReplyBytes  int
	tenantToken    int
	tenantResults  string
	tenantInbox    string
	tenantAccounts bool
	interTenants   string
	metricTenants  int
	tenantWeights  string
	tenantQuotas   string
	tenantNames    string
	tenantIdle     time.Duration
	maxTenants     int
	api            *gatewayFlags
}

// addServeFlags defines serve's flags; provision is the default of
// --provision (off for serve, create for dev) and api the default of
// --http-api (off for serve, loopback for dev).
func addServeFlags(fs *flagSet, provision, api string) *serveFlags {
	f := new(serveFlags)
	fs.remove("patience", "nothing replaces it: jobs go to the engine at once, whose one queue packs the texts of every job in flight; drop it")
	fs.remove("gather-tokens", "set --in-flight-tokens (4x the old value) and --interactive-tokens (2x), JETEMBED_IN_FLIGHT_TOKENS and JETEMBED_INTERACTIVE_TOKENS")
	fs.IntVar(&f.inFlightTokens, "in-flight-tokens", 0, "estimated tokens of the bulk jobs this process holds (in the engine's queue, running or publishing); when full it stops pulling (0: 4 x max-batch-tokens x sessions; interactive jobs have a budget of their own)")
	fs.IntVar(&f.interactive, "interactive-tokens", 0, "the one knob of this process's interactive capacity: estimated tokens of the requests and interactive jobs it holds (apart from the bulk budget, so a backlog never refuses a request; requests beyond it wait in a queue of up to 8 times as many tokens), also the engine's interactive admission budget and what a gateway sizes its calls by (0: 2 x max-batch-tokens x sessions)")
	fs.IntVar(&f.prefetchMax, "prefetch-max", jetstream.DefaultPrefetchMax, "most jobs buffered ahead of the consumer (and never more than the server's max ack pending); the prefetch adapts below it to finish within ack-wait/4")
	fs.IntVar(&f.prefetchBytes, "prefetch-bytes", jetstream.DefaultPrefetchBytes, "byte cap of the jobs buffered ahead of the consumer: pull requests ask for no more than fits (raised to the server's max payload)")
	fs.DurationVar(&f.grace, "grace", node.DefaultGrace, "on SIGTERM, how long in-flight jobs may take to finish before they are NAKed")
	fs.StringVar(&f.http, "http", telemetry.DefaultAddr, "address of /healthz, /readyz and /metrics (empty: off)")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", telemetry.LogAuto, "log format: auto (text on a terminal, else json), text or json")
	fs.DurationVar(&f.heartbeat, "heartbeat", 30*time.Second, "period of the heartbeat log line (0: none)")
	fs.StringVar(&f.provision, "provision", provision, "at start, off: check that the streams, the consumer and the KV bucket exist (exit if not); create: also create what is missing. Nothing existing is ever changed: that is jetembed provision")
	fs.BoolVar(&f.blobs, "blobs", true, "store results over the server's max payload in the blobs bucket and reply with a reference (false: reply result_too_large)")
	fs.StringVar(&f.cache, "cache", "off", "off, or kv: answer texts the fleet embedded before (same model, precision, tenant, outputs and truncation) from the cache bucket (--cache-bucket, made by jetembed provision), and store what this process computes there; cached texts still count in usage")
	fs.IntVar(&f.maxResult, "max-result-bytes", 0, "largest encoded result of one job, in bytes; a job over it fails result_too_large, refused before it runs when its dense and ColBERT vectors alone exceed it (0: auto, the larger of 32 MiB and 8 texts of the model's max tokens with dense and ColBERT; -1: none)")
	fs.BoolVar(&f.printConfig, "print-config", false, "print the effective value of every flag with its environment variable, and exit")
	fs.StringVar(&f.replyAllow, "reply-allow", "", "subject patterns a reply may match besides its tenant's space, comma separated; {tenant} stands for the job's tenant (audit.{tenant}.>), a pattern without it is open to every tenant; $ subjects and the jobs, DLQ and service subjects are always refused (bad_reply)")
	fs.IntVar(&f.maxReplyBytes, "max-reply-bytes", schema.DefaultMaxReplyBytes, "longest reply subject a result is sent to, in bytes (at most 1024)")
	fs.IntVar(&f.tenantToken, "tenant-token", schema.DefaultTenantToken, "position of the tenant in a job's subject (embed.jobs.<tenant>.>: 3); a reply goes only to the tenant's space (0: no tenants, one shared space: any embed.results.> or _INBOX.> reply)")
	fs.StringVar(&f.tenantResults, "tenant-results-prefix", schema.DefaultTenantResultsPrefix, "a tenant's results space: <prefix>.<tenant>.>")
	fs.StringVar(&f.tenantInbox, "tenant-inbox-prefix", schema.DefaultTenantInboxPrefix, "a tenant's inbox space: <prefix><tenant>.> (its connection's nats inbox prefix)")
	fs.BoolVar(&f.tenantAccounts, "tenant-accounts", true, "tenants are NATS accounts importing the fleet's subjects (deploy/nats/accounts.conf): a request's reply may be the server's routed reply (_R_.>), which goes back to the requester alone (false: one account, replies only in the tenant's inbox or results)")
	fs.StringVar(&f.interTenants, "interactive-tenants", "*", "tenants whose queued jobs may ask for priority interactive, comma separated; another tenant's run as bulk, so a bulk producer cannot take the budget of the callers who wait (*: every tenant; empty: none; requests are interactive whatever it says)")
	fs.IntVar(&f.metricTenants, "metrics-tenants", telemetry.DefaultMetricTenants, "how many tenants get a tenant label of their own in the per-tenant usage metrics (jetembed_tenant_jobs_total and the others): the first this process meets; every other is counted as tenant=*other, so the series stay bounded (0: none; exact per-tenant figures are in the usage stream: jetembed usage)")
	fs.StringVar(&f.tenantWeights, "tenant-weight", "", "tenants' weights in the fair share: the engine's queue admits tokens, and per-tenant consumers (jetembed provision --per-tenant) are pulled, in proportion to them while tenants wait; NAME=WEIGHT, comma separated, 1 to 1000 (*=W: every tenant not named; default 1)")
	fs.StringVar(&f.tenantQuotas, "tenant-quota", "", "tenants' quotas: NAME=TOKENS_PER_MINUTE[/IN_FLIGHT_TOKENS], comma separated (0: no bound; *=...: every tenant not named; default none); tokens are estimated at 4 bytes of a job's body; over it a tenant's queued jobs wait in the stream unfetched (with per-tenant consumers) and its requests are refused quota_exceeded with a retry-after")
	fs.StringVar(&f.tenantNames, "tenant-names", "", "JWT mode, where a tenant is its account's public key: a key -> name file (tenants.tsv, as the commands of tenant add --jwt append to it: key TAB name a line); --tenant-weight, --tenant-quota and --interactive-tenants may then name a tenant by name, and the per-tenant metrics label it by name")
	fs.DurationVar(&f.tenantIdle, "tenant-idle", jetstream.DefaultTenantIdle, "delete a tenant's consumer after it has been empty this long (per-tenant consumers); its next job makes it again")
	fs.IntVar(&f.maxTenants, "max-tenants", jetstream.DefaultMaxTenants, "per-tenant consumers: at most this many for tenants --tenant-weight and --tenant-quota do not name (a named one always gets its own); a tenant beyond it has its jobs wait in the stream, and while any wait an empty consumer is deleted at once and one that held its slot for --tenant-idle yields it, so the slots go round (without permissions a producer can mint a tenant a subject; each consumer costs the servers state and every member a fetch loop)")
	f.api = addGatewayFlags(fs, "http-api", api)
	return f
}

// serveConfig is everything serve and dev run with, parsed once from the
// flags: the node's config (but for what the process adds at start:
// the engine opener, the metrics and the logger), the engine's, and the
// log settings.
type serveConfig struct {
	Runtime node.Config
	Engine  engineConfig
	// Objects is what dev provisions (the node's Objects too).
	Objects   jetstream.Config
	LogLevel  slog.Level
	LogFormat string
}

// provisionCheck parses --provision.
func provisionCheck(s string) (node.Check, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "off", "false":
		return node.CheckObjects, nil
	case "create":
		return node.CreateMissing, nil
	case "true", "on", "apply":
		return 0, fmt.Errorf("%w: --provision=%s: serve no longer creates or updates the server's objects; run `jetembed provision` (as a user allowed to), then serve with --provision=off, or --provision=create to create only what is missing", errUsage, s)
	}
	return 0, fmt.Errorf("%w: --provision %q: want off or create", errUsage, s)
}

// provisionMode is the mode dev provisions with for a --provision check.
func provisionMode(c node.Check) jetstream.Mode {
	if c == node.CreateMissing {
		return jetstream.ModeCreate
	}
	return jetstream.ModeCheck
}

// config gathers the parsed flags into one [serveConfig].
func (sf *serveFlags) config(objects jetstream.Config, ef *engineFlags, ff *fleetFlags) (serveConfig, error) {
	c := serveConfig{Objects: objects, LogFormat: sf.logFormat}
	if err := c.LogLevel.UnmarshalText([]byte(sf.logLevel)); err != nil {
		return c, fmt.Errorf("%w: --log-level %q", errUsage, sf.logLevel)
	}
	if sf.maxResult < -1 {
		return c, fmt.Errorf("%w: --max-result-bytes %d: want -1 (none), 0 (auto) or a size in bytes", errUsage, sf.maxResult)
	}
	var err error
	if c.Engine, err = ef.config(); err != nil {
		return c, err
	}
	// One budget, owned by the node: the engine admits by it and the
	// service advertises it; one default (engine.DefaultBudgets).
	mbt, sessions := c.Engine.Engine.MaxBatchTokens, c.Engine.Engine.Sessions
	inFlight := sf.inFlightTokens
	if inFlight <= 0 {
		inFlight = ef.admission
	}
	inFlight, interactive := engine.DefaultBudgets(inFlight, sf.interactive, mbt, sessions)
	replies, err := sf.replyPolicy(objects)
	if err != nil {
		return c, err
	}
	var cache bool
	switch strings.ToLower(strings.TrimSpace(sf.cache)) {
	case "off", "":
	case "kv":
		cache = true
	default:
		return c, fmt.Errorf("%w: --cache %q: want off or kv", errUsage, sf.cache)
	}
	check, err := provisionCheck(sf.provision)
	if err != nil {
		return c, err
	}
	fc, err := ff.config(c.Engine)
	if err != nil {
		return c, err
	}
	var names map[string]string
	if sf.tenantNames != "" {
		if names, err = readTenantNames(sf.tenantNames); err != nil {
			return c, fmt.Errorf("%w: --tenant-names: %v", errUsage, err)
		}
	}
	weights, err := jetstream.ParseWeights(sf.tenantWeights)
	if err != nil {
		return c, fmt.Errorf("%w: --tenant-weight: %w", errUsage, err)
	}
	weights = byKey(weights, names)
	// One weight a tenant: the engine's queue admits by it, and the
	// per-tenant pulling takes from the stream by it.
	c.Engine.Engine.TenantWeights = weights
	quotas, err := jetstream.ParseQuotas(sf.tenantQuotas)
	if err != nil {
		return c, fmt.Errorf("%w: --tenant-quota: %w", errUsage, err)
	}
	quotas = byKey(quotas, names)
	if sf.maxTenants < 1 {
		return c, fmt.Errorf("%w: --max-tenants %d: want at least 1", errUsage, sf.maxTenants)
	}
	var api *node.APIConfig
	if sf.api.listen != "" {
		api = &node.APIConfig{Listen: sf.api.listen, Gateway: sf.api.config()}
	}
	c.Runtime = node.Config{
		Objects:           objects,
		Check:             check,
		InFlightTokens:    inFlight,
		InteractiveTokens: interactive,
		Loop:              consumer.Config{Replies: replies, InteractiveTenants: keysOf(interactiveTenants(sf.interTenants), names), Precision: resultPrecision(c.Engine.Provider)},
		Blobs:             sf.blobs,
		Cache:             cache,
		MaxResultBytes:    int64(sf.maxResult),
		PrefetchMax:       sf.prefetchMax,
		PrefetchBytes:     sf.prefetchBytes,
		Fair:              jetstream.FairConfig{Shares: jetstream.Shares{Weights: weights, Quotas: quotas}, Idle: sf.tenantIdle, MaxTenants: sf.maxTenants},
		Refresh:           ff.poll,
		Grace:             sf.grace,
		Fleet:             fc,
		API:               api,
		HTTP:              sf.http,
		Heartbeat:         sf.heartbeat,
		MetricTenants:     metricTenants(sf.metricTenants),
		TenantNames:       names,
		Version:           version,
		Notes:             []any{"memory_budget", c.Engine.BudgetNote, "malloc", mallocenv.Mode()},
	}
	return c, nil
}

// metricTenants is --metrics-tenants as node.Config has it (0 there is
// the default, none is negative).
func metricTenants(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

// interactiveTenants parses --interactive-tenants: nil for "*" (every
// tenant), else the names listed (none when empty).
func interactiveTenants(s string) []string {
	if strings.TrimSpace(s) == "*" {
		return nil
	}
	out := []string{}
	for _, t := range strings.Split(s, ",") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out
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

// serveCommand is the flags serve and dev share, defined on one flag set.
type serveCommand struct {
	fs *flagSet
	nf *natsFlags // nil for dev
	pf *provisionFlags
	ef *engineFlags
	ff *fleetFlags
	sf *serveFlags
}

// addServeCommand defines the flags of serve on fs: with the NATS flags
// (dev serves its own server), the warm-up grid by default (warm) and
// provision the default of --provision. Without the NATS flags (dev) the
// HTTP API is on by default, on loopback: a newcomer's OpenAI client
// works against `make run` without a restart, and the port is local.
func addServeCommand(fs *flagSet, natsFlags, warm bool, provision string) serveCommand {
	sc := serveCommand{fs: fs}
	api := gateway.DefaultListen
	if natsFlags {
		sc.nf = addNATSFlags(fs)
		api = ""
	}
	sc.pf, sc.ef, sc.ff, sc.sf = addProvisionFlags(fs, false), addEngineFlags(fs, warm), addFleetFlags(fs), addServeFlags(fs, provision, api)
	fs.addCommon(serveCommonFlags...)
	return sc
}

// serveCommonFlags are the flags `serve --help` and `dev --help` list (of
// those the command has): what a first deployment sets. The others, the
// objects' names and limits, the engine's fine tuning, the HTTP API's
// limits, the fleet's timings, are under --help-all, and all are in
// docs/configuration.md. At most 40 (TEI's router has about as many).
var serveCommonFlags = []string{
	// Where the server is and who we are.
	"nats", "nats-creds", "nats-user", "nats-password", "nats-token", "nats-nkey", "nats-tls-ca",
	// The model and the hardware.
	"model", "provider", "device", "sessions", "threads", "max-tokens", "max-batch-tokens", "memory-budget",
	"precision", "warmup-batches", "trt-cache", "fp16",
	// Capacity and shutdown.
	"in-flight-tokens", "interactive-tokens", "prefetch-max", "grace",
	// Operations.
	"http", "log-level", "log-format", "print-config", "provision", "replicas", "fleet",
	// The HTTP API in this process.
	"http-api", "api-key", "tls-cert", "tls-key",
	// Tenancy and results.
	"tenant-token", "tenant-weight", "reply-allow", "max-result-bytes", "blobs", "cache",
}

// parse parses the flags of serve and dev into a [serveConfig]; done is
// true when nothing is left to do (--print-config printed the
// configuration). The NATS options are set by the caller (dev serves its
// own server).
func (sc serveCommand) parse(args []string, io stdio) (c serveConfig, done bool, err error) {
	if err := sc.fs.Parse(args); err != nil {
		return c, false, err
	}
	if sc.fs.NArg() > 0 {
		return c, false, fmt.Errorf("%w: unexpected arguments %q", errUsage, sc.fs.Args())
	}
	if sc.sf.printConfig {
		printConfig(sc.fs, io)
		return c, true, nil
	}
	objects, err := sc.pf.config()
	if err != nil {
		return c, false, err
	}
	c, err = sc.sf.config(objects, sc.ef, sc.ff)
	return c, false, err
}

// byKey rewrites the tenants m names by a name of names (key -> name) to
// their keys, every key of that name (a tenant whose key was rotated has
// two); a tenant named by its key, or not in names, stays, and wins over
// its name.
func byKey[V any](m map[string]V, names map[string]string) map[string]V {
	if len(names) == 0 || len(m) == 0 {
		return m
	}
	keys := keysByName(names)
	out := make(map[string]V, len(m))
	for t, v := range m {
		for _, k := range keys[t] {
			out[k] = v
		}
	}
	for t, v := range m {
		if _, isName := keys[t]; !isName {
			out[t] = v
		}
	}
	return out
}

// keysOf is tenants with every name of names replaced by its keys; nil
// (every tenant) stays nil.
func keysOf(tenants []string, names map[string]string) []string {
	if tenants == nil || len(names) == 0 {
		return tenants
	}
	keys := keysByName(names)
	out := make([]string, 0, len(tenants))
	for _, t := range tenants {
		if ks, ok := keys[t]; ok {
			out = append(out, ks...)
			continue
		}
		out = append(out, t)
	}
	return out
}

// keysByName inverts a key -> name table, in key order.
func keysByName(names map[string]string) map[string][]string {
	keys := make(map[string][]string, len(names))
	for _, k := range slices.Sorted(maps.Keys(names)) {
		keys[names[k]] = append(keys[names[k]], k)
	}
	return keys
}

// resultPrecision is the precision the result cache's keys name when the
// provider decides it: TensorRT's FP16 engines (--fp16) give other
// vectors than fp32 ones of the same model. "" leaves it to the engine
// (fp32, or int8 when --precision int8 held its canary).
func resultPrecision(p ort.Provider) string {
	if p.Kind == ort.TensorRT && p.FP16 {
		return "fp16"
	}
	return ""
}
