package main

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/internal/consumer"
	"github.com/jetembed/jetembed/internal/telemetry"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// serve's flags and the configuration parsed from them.

// serveFlags are the flags of serve beyond the NATS, provisioning and
// engine ones. The consumer's ack wait, max deliver, backoff and max ack
// pending are not among them: they are the server's (see `provision`).
type serveFlags struct {
	patience       *time.Duration
	gatherTokens   *int
	inFlightTokens *int
	interactive    *int
	prefetchMax    *int
	prefetchBytes  *int
	grace          *time.Duration
	http           *string
	logLevel       *string
	logFormat      *string
	heartbeat      *time.Duration
	provision      *string
	blobs          *bool
	maxResult      *int
	printConfig    *bool
	replyAllow     *string
	maxReplyBytes  *int
	tenantToken    *int
	tenantResults  *string
	tenantInbox    *string
	interTenants   *string
	api            *gatewayFlags
}

// addServeFlags defines serve's flags; provision is the default of
// --provision (off for serve, create for dev).
func addServeFlags(fs *flagSet, provision string) *serveFlags {
	return &serveFlags{
		patience:       fs.Duration("patience", consumer.DefaultPatience, "how long bulk jobs wait before they go to the engine, so its packer has more texts to choose from (interactive jobs wait none)"),
		gatherTokens:   fs.Int("gather-tokens", 0, "estimated tokens of queued jobs that end the patience window early (0: max-batch-tokens x sessions)"),
		inFlightTokens: fs.Int("in-flight-tokens", 0, "estimated tokens of the bulk jobs this process holds; when full it stops pulling (0: 4 x gather-tokens; interactive jobs have a budget of their own)"),
		interactive:    fs.Int("interactive-tokens", 0, "the one knob of this process's interactive capacity: estimated tokens of the requests and interactive jobs it holds (apart from the bulk budget, so a backlog never refuses a request; requests beyond it wait in a queue of up to 8 times as many tokens), also the engine's interactive admission budget and what a gateway sizes its calls by (0: 2 x gather-tokens)"),
		prefetchMax:    fs.Int("prefetch-max", jetstream.DefaultPrefetchMax, "most jobs buffered ahead of the consumer (and never more than the server's max ack pending); the prefetch adapts below it to finish within ack-wait/4"),
		prefetchBytes:  fs.Int("prefetch-bytes", jetstream.DefaultPrefetchBytes, "byte cap of the jobs buffered ahead of the consumer: pull requests ask for no more than fits (raised to the server's max payload)"),
		grace:          fs.Duration("grace", 30*time.Second, "on SIGTERM, how long in-flight jobs may take to finish before they are NAKed"),
		http:           fs.String("http", telemetry.DefaultAddr, "address of /healthz, /readyz and /metrics (empty: off)"),
		logLevel:       fs.String("log-level", "info", "log level: debug, info, warn or error"),
		logFormat:      fs.String("log-format", telemetry.LogAuto, "log format: auto (text on a terminal, else json), text or json"),
		heartbeat:      fs.Duration("heartbeat", 30*time.Second, "period of the heartbeat log line (0: none)"),
		provision:      fs.String("provision", provision, "at start, off: check that the streams, the consumer and the KV bucket exist (exit if not); create: also create what is missing. Nothing existing is ever changed: that is jetembed provision"),
		blobs:          fs.Bool("blobs", true, "store results over the server's max payload in the blobs bucket and reply with a reference (false: reply result_too_large)"),
		maxResult:      fs.Int("max-result-bytes", 0, "largest encoded result of one job, in bytes; a job over it fails result_too_large, refused before it runs when its dense and ColBERT vectors alone exceed it (0: auto, the larger of 32 MiB and 8 texts of the model's max tokens with dense and ColBERT; -1: none)"),
		printConfig:    fs.Bool("print-config", false, "print the effective value of every flag with its environment variable, and exit"),
		replyAllow:     fs.String("reply-allow", "", "subject patterns a reply may match besides its tenant's space, comma separated; {tenant} stands for the job's tenant (audit.{tenant}.>), a pattern without it is open to every tenant; $ subjects and the jobs, DLQ and service subjects are always refused (bad_reply)"),
		maxReplyBytes:  fs.Int("max-reply-bytes", schema.DefaultMaxReplyBytes, "longest reply subject a result is sent to, in bytes (at most 1024)"),
		tenantToken:    fs.Int("tenant-token", schema.DefaultTenantToken, "position of the tenant in a job's subject (embed.jobs.<tenant>.>: 3); a reply goes only to the tenant's space (0: no tenants, one shared space: any embed.results.> or _INBOX.> reply)"),
		tenantResults:  fs.String("tenant-results-prefix", schema.DefaultTenantResultsPrefix, "a tenant's results space: <prefix>.<tenant>.>"),
		tenantInbox:    fs.String("tenant-inbox-prefix", schema.DefaultTenantInboxPrefix, "a tenant's inbox space: <prefix><tenant>.> (its connection's nats inbox prefix)"),
		interTenants:   fs.String("interactive-tenants", "*", "tenants whose queued jobs may ask for priority interactive, comma separated; another tenant's run as bulk, so a bulk producer cannot take the budget of the callers who wait (*: every tenant; empty: none; requests are interactive whatever it says)"),
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
	// InteractiveTenants is --interactive-tenants: nil for every tenant.
	InteractiveTenants []string
	// Blobs stores results over the max payload in EMBED_BLOBS.
	Blobs bool
	// MaxResultBytes is --max-result-bytes: 0 auto ([serveConfig.resultLimit]),
	// -1 none.
	MaxResultBytes int

	Patience, Grace, Heartbeat                      time.Duration
	GatherTokens, InFlightTokens, InteractiveTokens int
	PrefetchMax, PrefetchBytes                      int
	HTTP                                            string
	LogLevel                                        slog.Level
	LogFormat                                       string
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
		GatherTokens: *sf.gatherTokens, InFlightTokens: *sf.inFlightTokens, InteractiveTokens: *sf.interactive, PrefetchMax: *sf.prefetchMax,
		PrefetchBytes: *sf.prefetchBytes,
		HTTP:          *sf.http, LogFormat: *sf.logFormat, Blobs: *sf.blobs, MaxResultBytes: *sf.maxResult, API: sf.api}
	if c.MaxResultBytes < -1 {
		return c, fmt.Errorf("%w: --max-result-bytes %d: want -1 (none), 0 (auto) or a size in bytes", errUsage, c.MaxResultBytes)
	}
	if err := c.LogLevel.UnmarshalText([]byte(*sf.logLevel)); err != nil {
		return c, fmt.Errorf("%w: --log-level %q", errUsage, *sf.logLevel)
	}
	c.InteractiveTokens = interactiveTokens(*sf.interactive, c.gatherTokens(), ef)
	var err error
	if c.Replies, err = sf.replyPolicy(cfg); err != nil {
		return c, err
	}
	c.InteractiveTenants = interactiveTenants(*sf.interTenants)
	c.Provision, err = provisionMode(*sf.provision)
	return c, err
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

// gatherTokens is --gather-tokens, or its default: what fills every
// session's run once.
func (c serveConfig) gatherTokens() int {
	if c.GatherTokens > 0 {
		return c.GatherTokens
	}
	gather := consumer.DefaultMaxBatchTokens
	if c.Engine != nil && c.Engine.maxBatchTokens != nil && *c.Engine.maxBatchTokens > 0 {
		gather = *c.Engine.maxBatchTokens
	}
	if c.Engine != nil && c.Engine.sessions != nil {
		gather *= max(*c.Engine.sessions, 1)
	}
	return gather
}

// interactiveTokens is the process's one interactive capacity: the
// consumer's budget of held requests and the engine's interactive
// admission alike, so that what the consumer takes in the engine runs.
// --engine-interactive-tokens, the second knob it replaces, is a
// deprecated alias read when --interactive-tokens is not set.
func interactiveTokens(flag, gather int, ef *engineFlags) int {
	n := flag
	if ef != nil && ef.interactive != nil && *ef.interactive > 0 {
		if n <= 0 {
			n = *ef.interactive
		}
		if ef.warn != nil {
			fmt.Fprintf(ef.warn, "warning: --engine-interactive-tokens (JETEMBED_ENGINE_INTERACTIVE_TOKENS) is deprecated: --interactive-tokens is the one interactive budget, the engine's included; using %d\n", n)
		}
	}
	if n <= 0 {
		n = 2 * gather
	}
	if ef != nil && ef.interactive != nil {
		*ef.interactive = n
	}
	return n
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

// parseServe parses the flags of serve and dev into the server-side
// config and serve's own; done is true when nothing is left to do
// (--print-config printed the configuration).
func parseServe(fs *flagSet, args []string, io stdio, pf *provisionFlags, ef *engineFlags, ff *fleetFlags, sf *serveFlags) (cfg jetstream.Config, c serveConfig, done bool, err error) {
	if err := fs.Parse(args); err != nil {
		return cfg, c, false, err
	}
	if fs.NArg() > 0 {
		return cfg, c, false, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if *sf.printConfig {
		printConfig(fs, io)
		return cfg, c, true, nil
	}
	if cfg, err = pf.config(); err != nil {
		return cfg, c, false, err
	}
	c, err = sf.config(jetstream.Options{}, cfg, ef, ff)
	return cfg, c, false, err
}

// autoResultFloor is the least --max-result-bytes=0 allows: dense and
// sparse results of any job within the job limits fit it.
const autoResultFloor = 32 << 20

// resultLimit is the per-job result cap for an engine e, in bytes (0: none):
// --max-result-bytes, or for 0 the larger of [autoResultFloor] and eight
// texts of e's max tokens with dense and ColBERT vectors (256 MiB on
// BGE-M3 at 8192 tokens: a job of 1024 such texts would be 2 GiB).
func (c serveConfig) resultLimit(e interface {
	OutputBytes(tokens int, o engine.Output) int64
	MaxTokens() int
}) int64 {
	switch {
	case c.MaxResultBytes > 0:
		return int64(c.MaxResultBytes)
	case c.MaxResultBytes < 0:
		return 0
	}
	return max(autoResultFloor, 8*e.OutputBytes(e.MaxTokens(), engine.Dense|engine.ColBERT))
}
