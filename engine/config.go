package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/jetembed/jetembed/engine/internal/pack"
)

// Cost is the run-time (or memory) model of a chunk of B rows of S tokens,
// A*B*S + Bq*B*S^2, that [Config.Cost] gives and [Stats] reports; the
// packer behind the engine fits it.
type Cost = pack.Cost

// Config tunes an [Engine]. The zero value is usable: [Config.WithDefaults]
// fills every unset field.
type Config struct {
	// Sessions is the number of model sessions (one per GPU, or N CPU
	// workers). Each runs on its own OS thread.
	Sessions int
	// MaxTokens caps a text's tokens (special tokens included) below the
	// model's own maximum; 0 means the model's maximum.
	MaxTokens int
	// MaxBatchTokens bounds the padded tokens (batch x seq) of one chunk;
	// MaxBatch bounds its rows.
	MaxBatchTokens int
	MaxBatch       int
	// Tiers are the padded sequence lengths; default every power of two
	// from 8 to MaxTokens, each octave cut into 4 steps on multiples of 8
	// (..., 64, 80, 96, 112, 128, 160, ...). A provider that compiles a
	// kernel per shape (TensorRT, CUDA graphs) wants few shapes.
	Tiers []int
	// PadExact pads each chunk to its own longest text instead of a tier:
	// right where nothing is compiled per shape (the CPU provider).
	PadExact bool
	// Cost is the chunk run-time model in seconds. The scheduler starts
	// from a prior derived from the model's size (or this, when set, or
	// the probe's when Probe is set) and refits it from every run.
	Cost  Cost
	Probe bool
	// MaxChunkLatency caps the modelled run time of a bulk chunk, so an
	// interactive text waits at most about one chunk per session; 0
	// means the default of 100 ms, negative no cap.
	MaxChunkLatency time.Duration
	// Attention is the attention form the runners use; it sets the
	// memory model's B*S^2 term (the zero value, the graph's, keeps it).
	Attention Attention
	// Precision is the runners' arithmetic; it sets the cost model's
	// prior (int8 linear layers run faster) and the memory model's B*S
	// term (int8 adds the quantized activations and their scales).
	Precision Precision
	// MemoryBudget bounds the modelled workspace (bytes) of the chunks
	// and warm-up shapes of all sessions together: each session's chunk
	// stays within MemoryBudget / Sessions. A text that does not fit alone
	// is cut (or fails text_too_long) at the length that does. 0 means no
	// budget.
	MemoryBudget int64
	// AdmissionTokens is the bulk admission budget: real tokens of all bulk
	// Embed calls in progress (admitted: queued to run, or running).
	// Default (see [DefaultBudgets]) 4 x MaxBatchTokens x Sessions.
	AdmissionTokens int
	// InteractiveTokens is the interactive class's own admission budget
	// (see [Interactive]); default 2 x MaxBatchTokens x Sessions.
	InteractiveTokens int
	// QueueTokens bounds the real tokens of the interactive calls waiting
	// for room; beyond it a call is refused overloaded (or pushes out
	// calls of a tenant over its share). Default 8 x InteractiveTokens.
	// Bulk calls are not bounded here: their callers wait for them (the
	// job loop stops fetching while its bulk job waits).
	QueueTokens int
	// TenantWeights are the tenants' weights in the deficit round robin
	// of the admission queue: a tenant of weight 3 is admitted three
	// times the tokens of one of weight 1 while both wait. [AnyTenant]
	// ("*") weighs every tenant not named; default 1.
	TenantWeights map[string]int
	// Aging is how long bulk work may wait without progress while
	// interactive work runs before its next chunk goes first; default 1 s.
	Aging time.Duration
	// Guard refuses unwarmed long shapes (TensorRT JIT compiles take
	// minutes); see [Config.GuardSeq].
	Guard bool
	// GuardSeq is the sequence length from which the guard applies.
	GuardSeq int
	// BreakerThreshold is the number of consecutive run errors after which a
	// session is dropped and reloaded.
	BreakerThreshold int
	// ReloadBackoff is the pause between attempts to reload a dropped session.
	ReloadBackoff time.Duration
	// Warmup is the (batch, seq) grid run on every session before New
	// returns. Default: WarmupBatches x every tier up to MaxTokens, so no
	// shape the packer can produce at those batch sizes meets a cold
	// session (a GPU provider's first run of a shape is the slow one).
	// NoWarmup skips it (tests, or when the fleet warms later).
	Warmup   []Shape
	NoWarmup bool
	// WarmupBestEffort skips a grid shape that fails to warm up instead of
	// failing New (see [Engine.WarmupFailures]); a fatal engine-build error
	// still fails it.
	WarmupBestEffort bool
	// WarmupBatches are the batch sizes of the default grid; default 1, 2.
	WarmupBatches []int
	// WarmupMaxSeq caps the default grid's sequence lengths; 0 means
	// MaxTokens. A CPU session compiles nothing per shape, and warming
	// batch 2 at 8192 tokens holds gigabytes of attention scores, so
	// cmd caps CPU warm-up (see --warmup-max-seq).
	WarmupMaxSeq int
	// Coverage records the warmed shapes the JIT guard consults; default
	// a fresh [NewCoverage], which the engine raises as it runs shapes
	// (the fleet's pre-warms run them too, through [Engine.WarmShape]).
	// A test seeds one to start with shapes already warmed.
	Coverage Coverage
	// OnWarmed, when set, is called (from a session goroutine, one call at
	// a time; keep it short) when this engine ran a shape for the first
	// time, in warm-up or in band. Nothing in jetembed sets it (the fleet
	// reads [Engine.WarmedShapes]); tests watch warm-up through it.
	OnWarmed func(Shape)
	// SparseSkip are the ids left out of sparse vectors besides the model's
	// bos, eos and pad: the unk id, default XLM-R's 3. FlagEmbedding drops
	// exactly these four, not other special tokens such as <mask>.
	SparseSkip []int32
}

// Attention is how the sessions compute attention, as far as the memory
// model cares ([Config.Attention]).
type Attention int

const (
	// AttentionGraph is the exported graph's attention: every layer holds
	// heads x S x S scores, so a chunk's workspace grows with B*S^2.
	AttentionGraph Attention = iota
	// AttentionFused is attention without the scores (engine/ort's fused
	// form, ONNX Runtime's flash kernel): the workspace grows with B*S,
	// so the memory budget admits longer texts and batches of long ones.
	AttentionFused
)

func (a Attention) String() string {
	if a == AttentionFused {
		return "fused"
	}
	return "graph"
}

// Precision is the sessions' arithmetic, as far as the cost and memory
// models care ([Config.Precision]).
type Precision int

const (
	// PrecisionFP32 is the graph's float32 arithmetic.
	PrecisionFP32 Precision = iota
	// PrecisionInt8 is engine/ort's int8 rewrite: the encoder's linear
	// layers multiply int8 activations (quantized per token row) by int8
	// weights.
	PrecisionInt8
)

func (p Precision) String() string {
	if p == PrecisionInt8 {
		return "int8"
	}
	return "fp32"
}

// Shape is a padded chunk shape.
type Shape struct {
	Batch, Seq int
}

func (s Shape) String() string { return fmt.Sprintf("%dx%d", s.Batch, s.Seq) }

// DefaultMaxChunkLatency is the default [Config.MaxChunkLatency].
const DefaultMaxChunkLatency = 100 * time.Millisecond

// DefaultMaxBatchTokens is the default [Config.MaxBatchTokens] (raised to
// the max tokens when those are more).
const DefaultMaxBatchTokens = 16384

// DefaultBudgets fills the in-flight token budgets that are not set (0 or
// less) for an engine of sessions sessions running chunks of up to
// maxBatchTokens padded tokens: bulk 4 and interactive 2 times the tokens
// of one run of every session. It is the one default of both budgets:
// the engine admits by them, and a serving process (package node)
// advertises what the engine admits.
func DefaultBudgets(inFlight, interactiveTokens, maxBatchTokens, sessions int) (int, int) {
	if maxBatchTokens <= 0 {
		maxBatchTokens = DefaultMaxBatchTokens
	}
	run := maxBatchTokens * max(sessions, 1)
	if inFlight <= 0 {
		inFlight = 4 * run
	}
	if interactiveTokens <= 0 {
		interactiveTokens = 2 * run
	}
	return inFlight, interactiveTokens
}

// AnyTenant in [Config.TenantWeights] weighs every tenant not named.
const AnyTenant = "*"

// ErrConfig reports an unusable [Config].
var ErrConfig = errors.New("engine: invalid config")

// WithDefaults returns c with unset fields filled in, for a model whose
// maximum is modelMax tokens.
func (c Config) WithDefaults(modelMax int) Config {
	if c.Sessions == 0 {
		c.Sessions = 1
	}
	if c.MaxTokens == 0 || c.MaxTokens > modelMax {
		c.MaxTokens = modelMax
	}
	if c.MaxBatchTokens == 0 {
		c.MaxBatchTokens = max(DefaultMaxBatchTokens, c.MaxTokens)
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = 64
	}
	if len(c.Tiers) == 0 {
		c.Tiers = pack.Tiers(8, c.MaxTokens, 4)
	}
	c.AdmissionTokens, c.InteractiveTokens = DefaultBudgets(c.AdmissionTokens, c.InteractiveTokens, c.MaxBatchTokens, c.Sessions)
	switch {
	case c.MaxChunkLatency == 0:
		c.MaxChunkLatency = DefaultMaxChunkLatency
	case c.MaxChunkLatency < 0:
		c.MaxChunkLatency = 0
	}
	if c.Aging == 0 {
		c.Aging = time.Second
	}
	if c.GuardSeq == 0 {
		c.GuardSeq = 4096
	}
	if c.BreakerThreshold == 0 {
		c.BreakerThreshold = 3
	}
	if c.ReloadBackoff == 0 {
		c.ReloadBackoff = time.Second
	}
	if len(c.WarmupBatches) == 0 {
		c.WarmupBatches = []int{1, 2}
	}
	if c.Warmup == nil && !c.NoWarmup {
		maxSeq := c.MaxTokens
		if c.WarmupMaxSeq > 0 && c.WarmupMaxSeq < maxSeq {
			maxSeq = c.WarmupMaxSeq
		}
		for _, seq := range c.Tiers {
			if seq > maxSeq {
				break
			}
			for _, b := range c.WarmupBatches {
				c.Warmup = append(c.Warmup, Shape{b, seq})
			}
		}
	}
	if c.Coverage == nil {
		c.Coverage = NewCoverage()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Sessions < 1:
		return fmt.Errorf("%w: sessions %d < 1", ErrConfig, c.Sessions)
	case c.MaxTokens < 2:
		return fmt.Errorf("%w: max tokens %d < 2", ErrConfig, c.MaxTokens)
	case c.MaxBatchTokens < c.MaxTokens:
		return fmt.Errorf("%w: max batch tokens %d below max tokens %d: the longest text could not run", ErrConfig, c.MaxBatchTokens, c.MaxTokens)
	case c.MaxBatch < 1:
		return fmt.Errorf("%w: max batch %d < 1", ErrConfig, c.MaxBatch)
	case c.AdmissionTokens < c.MaxTokens || c.InteractiveTokens < c.MaxTokens:
		return fmt.Errorf("%w: in-flight tokens %d (interactive %d) below max tokens %d", ErrConfig, c.AdmissionTokens, c.InteractiveTokens, c.MaxTokens)
	case c.MemoryBudget < 0 || c.Aging < 0:
		return fmt.Errorf("%w: negative memory budget %d or aging %v", ErrConfig, c.MemoryBudget, c.Aging)
	case c.GuardSeq < 1:
		return fmt.Errorf("%w: guard seq %d < 1", ErrConfig, c.GuardSeq)
	case c.BreakerThreshold < 1:
		return fmt.Errorf("%w: breaker threshold %d < 1", ErrConfig, c.BreakerThreshold)
	case c.ReloadBackoff < 0:
		return fmt.Errorf("%w: reload backoff %v < 0", ErrConfig, c.ReloadBackoff)
	case c.Cost.A < 0 || c.Cost.Bq < 0:
		return fmt.Errorf("%w: negative cost model %+v", ErrConfig, c.Cost)
	}
	for _, s := range c.Warmup {
		if s.Batch < 1 || s.Seq < 2 || s.Seq > c.MaxTokens {
			return fmt.Errorf("%w: warm-up shape %v outside 1..%d tokens", ErrConfig, s, c.MaxTokens)
		}
	}
	if err := c.packConfig().Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// chunkMemory is the workspace budget of one session's chunk; 0 none.
func (c Config) chunkMemory() int64 {
	return c.MemoryBudget / int64(max(c.Sessions, 1))
}

func (c Config) packConfig() pack.Config {
	return pack.Config{
		MaxTokens: c.MaxBatchTokens,
		MaxBatch:  c.MaxBatch,
		Tiers:     c.Tiers,
	}
}
