package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/fleet"
	"github.com/jetembed/jetembed/gateway"
	"github.com/jetembed/jetembed/jetstream"
)

var (
	// ErrConfig means a [Config], or the config of a layer it carries
	// (the job loop's, the gateway's), is unusable.
	ErrConfig = errors.New("node: invalid config")
	// ErrObjects means the server's streams, consumer or buckets are
	// missing (and [Config.Check] may not create them) or could not be
	// read.
	ErrObjects = errors.New("node: server objects")
)

// Defaults of [Config].
const (
	DefaultGrace   = jetstream.DefaultGrace
	DefaultRefresh = jetstream.DefaultRefresh
)

// Check is what [Node.Start] does with the server's objects.
type Check int

const (
	// CheckObjects requires every object to exist: one missing ends the
	// start with [ErrObjects]. Nothing is created or changed: that is
	// `jetembed provision`'s.
	CheckObjects Check = iota
	// CreateMissing creates the objects that are missing; nothing existing
	// is changed.
	CreateMissing
	// SkipCheck checks nothing: the caller provisioned them (dev).
	SkipCheck
)

// Engine is what [Config.Open] returns.
type Engine struct {
	// Engine embeds; the node closes it when it ends.
	Engine *engine.Engine
	// Tokenizer serves the tokenize endpoint; nil leaves it out.
	Tokenizer jetstream.Tokenizer
	// Notes are key-value pairs added to the ready log line (how
	// attention runs, how the memory budget was chosen).
	Notes []any
}

// Config is everything a [Node] runs with. Values only, but for
// [Config.Open] and the process's metrics: the flags of `jetembed serve`
// map onto it one to one.
type Config struct {
	// NATS is how to connect, and connect again after the server closed
	// the connection for good.
	NATS jetstream.Options
	// Objects names the streams, the durable consumer and the buckets.
	// Its consumer settings (AckWait, MaxDeliver, BackOff, MaxAckPending)
	// are not used: the worker reads them from the server.
	Objects jetstream.Config
	// Check is what the start does with the server's objects.
	Check Check
	// Open opens the engine, once, after the objects check; it outlives
	// the connections. With [FleetConfig.ShareProbe] it must open it
	// without its cost probe: the node takes a peer's coefficients, or
	// probes and shares them.
	Open func(ctx context.Context) (Engine, error)

	// InFlightTokens and InteractiveTokens are the process's one token
	// budget, bulk and interactive: the engine admits every Embed call of
	// every job and request by them ([engine.Engine.SetBudgets]), and the
	// service advertises the interactive one to gateways. 0 keeps the
	// engine's own ([engine.DefaultBudgets] unless Open configured it).
	InFlightTokens, InteractiveTokens int
	// Loop tunes the job loop: reply policy, request wait, interactive
	// tenants. Its AckWait and MaxDeliver are the server's; its Blobs,
	// MaxResultBytes, Metrics and Logger are set by the node.
	Loop consumer.Config
	// Blobs stores results over the server's max payload in the blobs
	// bucket and replies with a reference; false answers them
	// result_too_large.
	Blobs bool
	// Cache answers texts the fleet embedded before from the cache bucket
	// of Objects (EMBED_CACHE, which must exist: `jetembed provision`
	// creates it) and stores what this node computes there (serve --cache
	// kv). Without it the bucket is neither checked nor used.
	Cache bool
	// MaxResultBytes caps one job's encoded result: 0 is the larger of 32
	// MiB and 8 texts of the model's max tokens with dense and ColBERT
	// vectors; -1 is none.
	MaxResultBytes int64
	// PrefetchMax bounds the jobs buffered ahead of the job loop (never
	// more than the server's MaxAckPending); PrefetchBytes their bytes.
	// Zero means jetstream's defaults.
	PrefetchMax, PrefetchBytes int
	// Fair are the tenants' weights and quotas, and how per-tenant
	// consumers are retired (see [jetstream.FairConfig]).
	Fair jetstream.FairConfig
	// Refresh is how often the jobs consumer's info is read: the backlog
	// the gauges, the heartbeat and the fleet's idleness see, and changed
	// server settings (which reopen the fetch loop). Default
	// [DefaultRefresh]; the node's worker reads it at this period (one
	// reading in the process: [jetstream.WorkerConfig.Refresh]).
	Refresh time.Duration
	// Grace bounds the drain when [Run]'s context ends, or when the worker
	// stops on its own. Default [DefaultGrace].
	Grace time.Duration

	// Fleet is the membership of the fleet that shares compiled shapes,
	// wants and probe coefficients through the engines bucket.
	Fleet FleetConfig
	// API, when set, serves the HTTP API in this process in front of the
	// worker itself.
	API *APIConfig

	// HTTP is the address of /healthz, /readyz and /metrics; empty: off.
	HTTP string
	// MetricsHandler serves /metrics; nil serves none.
	MetricsHandler http.Handler
	// MeterProvider receives jetembed's instruments (the jetembed_*
	// families); nil records nothing.
	MeterProvider metric.MeterProvider
	// MetricTenants is how many tenants get a tenant label of their own in
	// the jetembed_tenant_* families (the first met; the others count as
	// *other): 0 means [telemetry.DefaultMetricTenants], a negative value
	// none.
	MetricTenants int
	// TenantNames labels tenants by name in the jetembed_tenant_* families
	// (key -> name, JWT mode's tenants.tsv: there a tenant is its
	// account's public key); nil labels them as they come.
	TenantNames map[string]string
	// Heartbeat is the period of the heartbeat log line; 0: none.
	Heartbeat time.Duration

	// Version is the build's version, in the service info and the logs.
	Version string
	// Notes are key-value pairs added to the ready log line.
	Notes []any
	// Logger receives the process's log; default slog.Default().
	Logger *slog.Logger
}

// FleetConfig is the fleet membership of a [Config].
type FleetConfig struct {
	// On joins the fleet through the engines bucket of [Config.Objects].
	On bool
	// Member configures the membership; its Model, Busy and Logger are
	// set by the node.
	Member fleet.Config
	// ShareProbe installs, after [Config.Open], the cost coefficients a
	// peer with the same model, SM and Hardware stored, or probes and
	// stores them.
	ShareProbe bool
	// Hardware names what the coefficients depend on besides the model
	// and the SM (ort.Provider.Hardware).
	Hardware string
}

// APIConfig is the HTTP API a [Node] serves in front of its worker.
type APIConfig struct {
	// Listen is the API's address.
	Listen string
	// Gateway configures it. Its Requester and Pinger are the node's
	// worker; a zero JobBytes is sized by the server's max payload
	// ([gateway.JobBytesFor]); a nil Logger is the node's.
	Gateway gateway.Config
}

// WithDefaults returns c with every unset field filled in.
func (c Config) WithDefaults() Config {
	if c.Grace <= 0 {
		c.Grace = DefaultGrace
	}
	if c.Refresh <= 0 {
		c.Refresh = DefaultRefresh
	}
	if c.PrefetchMax <= 0 {
		c.PrefetchMax = jetstream.DefaultPrefetchMax
	}
	if c.PrefetchBytes <= 0 {
		c.PrefetchBytes = jetstream.DefaultPrefetchBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Open == nil:
		return fmt.Errorf("%w: no Open: nothing opens the engine", ErrConfig)
	case c.MaxResultBytes < -1:
		return fmt.Errorf("%w: MaxResultBytes %d: want -1 (none), 0 (auto) or a size in bytes", ErrConfig, c.MaxResultBytes)
	case c.Check < CheckObjects || c.Check > SkipCheck:
		return fmt.Errorf("%w: Check %d", ErrConfig, c.Check)
	case c.API != nil && c.API.Listen == "":
		return fmt.Errorf("%w: an API without a Listen address", ErrConfig)
	}
	if err := c.Objects.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// autoResultFloor is the least a zero MaxResultBytes allows: dense and
// sparse results of any job within the job limits fit it.
const autoResultFloor = 32 << 20

// resultLimit is the per-job result cap for an engine e, in bytes (0:
// none): [Config.MaxResultBytes], or for 0 the larger of [autoResultFloor]
// and eight texts of e's max tokens with dense and ColBERT vectors (256
// MiB on BGE-M3 at 8192 tokens: a job of 1024 such texts would be 2 GiB).
func (c Config) resultLimit(e interface {
	OutputBytes(tokens int, o engine.Output) int64
	MaxTokens() int
}) int64 {
	switch {
	case c.MaxResultBytes > 0:
		return c.MaxResultBytes
	case c.MaxResultBytes < 0:
		return 0
	}
	return max(autoResultFloor, 8*e.OutputBytes(e.MaxTokens(), engine.Dense|engine.ColBERT))
}
