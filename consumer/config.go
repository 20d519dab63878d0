package consumer

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jetembed/jetembed/schema"
)

// ErrConfig reports an unusable [Config].
var ErrConfig = errors.New("consumer: invalid config")

// Defaults of [Config.WithDefaults].
const (
	DefaultInProgressFraction = 0.5
	DefaultRequestWait        = 10 * time.Second
	// MaxRequestWait bounds the wait for interactive room of a request
	// whose deadline is further away (a caller's deadline is its own; a
	// queue slot held for hours is not).
	MaxRequestWait = 5 * time.Minute
)

// The delivery limits of a loop that no server gives any (one fed by a
// program or a test, not by jetstream.StartWorker): nats-server's AckWait
// for a consumer created without one, and five deliveries.
const (
	fallbackAckWait    = 30 * time.Second
	fallbackMaxDeliver = 5
)

// Config tunes a [Loop]. The zero value is usable after
// [Config.WithDefaults]; [New] applies it.
//
// The loop holds no queue and no budget of its own: a job it takes goes
// to the engine at once, in its own Embed call, whose one admission queue
// decides when its texts run by the engine's one token budget (bulk and
// interactive apart, tenants in turn) and packs them with those of every
// other call (as TEI's one queue does).
type Config struct {
	// InteractiveTenants are the tenants whose queued jobs may ask for
	// priority "interactive"; nil means every tenant. A queued job of
	// another tenant that asks for it runs as bulk (a warning once per
	// tenant), so that a bulk producer cannot take the interactive budget
	// meant for the callers who wait. Request-reply deliveries are
	// interactive whatever it says: the engine's queue is fair by tenant.
	InteractiveTenants []string
	// RequestWait is the longest a request without a deadline waits in
	// the engine's queue for interactive room before it is answered
	// overloaded. One with a
	// deadline waits until its deadline instead (at most [MaxRequestWait]).
	// Default 10 s, the Go client's request timeout.
	RequestWait time.Duration
	// Delivery are the JetStream consumer's AckWait and MaxDeliver. They
	// are the server's: jetstream.StartWorker sets them from the durable
	// consumer (and [Loop.SetDeliveryLimits] when they change). A loop fed
	// otherwise gets AckWait 30 s (nats-server's own default) and
	// MaxDeliver 5 for a zero field.
	Delivery DeliveryLimits
	// InProgressFraction is how much of AckWait a held message waits, since
	// its delivery or its last InProgress, before it is sent InProgress
	// again, until it is settled.
	InProgressFraction float64
	// NakBackoff computes the delay of a NAK from the delivery count;
	// JetStream's consumer BackOff applies to AckWait expiry, not to NAKs.
	NakBackoff Backoff
	// Limits bound what one job may ask for.
	Limits schema.Limits
	// Replies decides which reply subjects a result may go to; a job whose
	// reply it refuses is dead-lettered as bad_reply with no result sent.
	// The zero value is [schema.ReplyPolicy]'s defaults.
	Replies schema.ReplyPolicy
	// Model is the model id put in results; when empty, the Embedder's
	// ModelID().
	Model string
	// EstimateTokens estimates a text's tokens (the job's size in traces
	// and logs); default len(text)/3 + 2, which over-counts for most
	// scripts.
	EstimateTokens func(text string) int
	// Logger receives one debug line per job and a warning per failure;
	// texts are never logged. Default slog.Default().
	Logger *slog.Logger
	// Metrics records counts and latencies; nil records nothing.
	Metrics Metrics
	// Usage stores what every job settled for good cost, once per job
	// (see [UsageRecorder]); nil keeps no record (the per-tenant metrics
	// still count, when Metrics has [UsageMetrics]).
	Usage UsageRecorder
	// Blobs stores results over the publisher's max payload (see
	// [PayloadLimiter]); nil answers them result_too_large instead.
	Blobs BlobStore
	// MaxResultBytes caps one job's encoded result: a job over it fails
	// result_too_large (DLQ, TERM), refused by the engine before it runs
	// when its dense and ColBERT vectors alone exceed it
	// ([engine.Call.OutputLimit]), else once encoded. 0 or less: no cap.
	MaxResultBytes int64
	// Cache, when set, is the fleet's cache of per-text results (serve
	// --cache kv): a job's texts are looked up there before the engine,
	// and what the engine computed is stored. nil: no cache.
	Cache Cache
	// CacheValueBytes is the largest cache value stored or accepted
	// (default [DefaultCacheValueBytes]): a larger one read is a miss.
	CacheValueBytes int
	// Precision names the engine's arithmetic in the cache's keys, so
	// that no int8 vector answers an fp32 text: default the Embedder's
	// Precision() when it has that method, else "fp32".
	Precision string
	// CacheModel names the model in the cache's keys: default the model
	// id; a serving process gives the digest of every file the model
	// reads, so that a changed tokenizer or head under the same graph
	// does not answer from the old one's entries.
	CacheModel string
	// Now is the clock; default time.Now. Tests move it.
	Now func() time.Time
}

// WithDefaults returns c with every unset field filled in.
func (c Config) WithDefaults() Config {
	if c.RequestWait <= 0 {
		c.RequestWait = DefaultRequestWait
	}
	if c.Delivery.AckWait <= 0 {
		c.Delivery.AckWait = fallbackAckWait
	}
	if c.Delivery.MaxDeliver == 0 {
		c.Delivery.MaxDeliver = fallbackMaxDeliver
	}
	if c.InProgressFraction <= 0 {
		c.InProgressFraction = DefaultInProgressFraction
	}
	c.NakBackoff = c.NakBackoff.withDefaults()
	c.Limits = c.Limits.WithDefaults()
	c.Replies = c.Replies.WithDefaults()
	if c.EstimateTokens == nil {
		c.EstimateTokens = schema.EstimateTokens
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = nopMetrics{}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.InProgressFraction >= 1:
		return fmt.Errorf("%w: InProgressFraction %g must be below 1, or the message expires first", ErrConfig, c.InProgressFraction)
	case c.Delivery.MaxDeliver < -1:
		return fmt.Errorf("%w: MaxDeliver %d (use -1 for unlimited)", ErrConfig, c.Delivery.MaxDeliver)
	case c.NakBackoff.Jitter > 1:
		return fmt.Errorf("%w: NakBackoff.Jitter %g above 1 could make a delay negative", ErrConfig, c.NakBackoff.Jitter)
	case c.NakBackoff.Max < c.NakBackoff.Base:
		return fmt.Errorf("%w: NakBackoff.Max %v below Base %v", ErrConfig, c.NakBackoff.Max, c.NakBackoff.Base)
	}
	if err := c.Replies.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// Backoff is the NAK delay policy: Base x 2^(n-1) for delivery n, capped at
// Max, then spread by up to ±Jitter of itself so jobs refused together do
// not all come back together. A zero Jitter means the default; a negative
// one means none, for tests that assert exact delays.
type Backoff struct {
	Base, Max time.Duration
	Jitter    float64
}

// Default NAK backoff.
const (
	DefaultNakBase   = time.Second
	DefaultNakMax    = time.Minute
	DefaultNakJitter = 0.2
)

func (b Backoff) withDefaults() Backoff {
	if b.Base <= 0 {
		b.Base = DefaultNakBase
	}
	if b.Max <= 0 {
		b.Max = max(DefaultNakMax, b.Base)
	}
	if b.Jitter == 0 {
		b.Jitter = DefaultNakJitter
	}
	return b
}

// Delay returns the NAK delay for delivery n (1 on first delivery).
func (b Backoff) Delay(n uint64) time.Duration {
	d := b.Base
	for i := uint64(1); i < n && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	if b.Jitter > 0 {
		d += time.Duration((rand.Float64()*2 - 1) * b.Jitter * float64(d))
	}
	return d
}
