package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/model"
	"github.com/jetembed/jetembed/engine/ort"
	"github.com/jetembed/jetembed/engine/tokenizer"
	"github.com/jetembed/jetembed/jetstream"
)

// engineFlags are the flags of every command that runs the model (embed,
// warmup, serve): where the model is, where it runs, and how the engine
// packs, guards and warms. The flag set writes into it; [engineFlags.config]
// turns it, once, into the [engineConfig] the rest of the command reads.
type engineFlags struct {
	modelDir, modelSHA  string
	modelFile           string
	noVerify, verify    bool
	ortLib, provider    string
	device              int
	sessions, threads   int
	maxTokens           int
	maxBatchTokens      int
	maxBatch            int
	tiers               string
	admission           int
	guard               string
	guardSeq            int
	breaker             int
	warmBatches, warmSq string
	warmMaxSeq          string
	warmStrict          string
	probe               string
	maxChunkLatency     time.Duration
	memoryBudget        string
	cpuArena            bool
	engineCache         string
	fp16                bool
	gpuMemMiB           int
	cudaArena           string
	trtWorkspaceMiB     int
	trtProfile          bool
	attention           string
	precision           string
}

// addEngineFlags defines the engine flags on fs. warm says whether the
// warm-up grid runs by default (a server and the warmup command want it; a
// one-shot embed on CPU does not).
func addEngineFlags(fs *flagSet, warm bool) *engineFlags {
	defBatches := ""
	if warm {
		defBatches = "auto"
	}
	f := new(engineFlags)
	fs.StringVar(&f.modelDir, "model", "", "the model: a directory (a jetembed model, or a Hugging Face snapshot such as BAAI/bge-m3's as downloaded), or a repo id org/name[@revision] found in the local Hugging Face cache (never downloaded)")
	fs.StringVar(&f.modelFile, "model-file", "", modelFileUsage)
	fs.StringVar(&f.modelSHA, "model-sha256", "", "pin: fail unless the model's digest (in its id: the sha256 of the graph file followed by its external data) starts with this")
	fs.BoolVar(&f.verify, "verify", false, "require manifest.json and that it pins every file jetembed reads (jetembed model lock writes it)")
	fs.BoolVar(&f.noVerify, "no-verify", false, "skip manifest.json even when the model has one (by default the files it lists are checked)")
	fs.StringVar(&f.ortLib, "ort-lib", "", "ONNX Runtime shared library (default: JETEMBED_ORT_LIB, then .deps, then the system loader)")
	fs.StringVar(&f.provider, "provider", "cpu", "execution provider: cpu, cuda or tensorrt (GPU providers never fall back to CPU)")
	fs.IntVar(&f.device, "device", 0, "first GPU ordinal; session i runs on device+i")
	fs.IntVar(&f.sessions, "sessions", 1, "model sessions (one per GPU, or CPU workers)")
	fs.IntVar(&f.threads, "threads", 0, "ONNX Runtime intra-op threads per session (0: one per core)")
	fs.IntVar(&f.maxTokens, "max-tokens", 0, "longest text in tokens before truncation (0: the model's maximum)")
	fs.IntVar(&f.maxBatchTokens, "max-batch-tokens", 0, "padded tokens (batch x seq) per session run (0: 16384)")
	fs.IntVar(&f.maxBatch, "max-batch", 0, "texts per session run (0: 64)")
	fs.StringVar(&f.tiers, "tiers", "", "padded sequence tiers, comma separated (default: none on cpu without the guard, where a chunk is padded to its own longest text; else 4 per octave from 8 to max tokens)")
	fs.IntVar(&f.admission, "engine-admission-tokens", 0, "engine admission budget: tokens of embed calls in progress; beyond it a call is refused as overloaded (0: 8 x max-batch-tokens x sessions)")
	fs.remove("engine-interactive-tokens", "--interactive-tokens (serve, dev; JETEMBED_INTERACTIVE_TOKENS) is the one interactive budget, the engine's included")
	fs.StringVar(&f.guard, "guard", "auto", "JIT guard refusing unwarmed long shapes: auto (on for tensorrt), on or off")
	fs.IntVar(&f.guardSeq, "guard-seq", 4096, "sequence length from which the JIT guard applies")
	fs.IntVar(&f.breaker, "breaker-threshold", 3, "consecutive run errors that drop and reload a session")
	fs.StringVar(&f.warmBatches, "warmup-batches", defBatches, "warm-up grid batch sizes, comma separated (empty: no warm-up; auto: 1,2 on cuda/tensorrt, none on cpu, which compiles nothing per shape)")
	fs.StringVar(&f.warmSq, "warmup-seqs", "", "warm-up grid sequence lengths (default: every tier up to --warmup-max-seq)")
	fs.StringVar(&f.warmMaxSeq, "warmup-max-seq", "auto", "longest sequence of the default warm-up grid: auto (max tokens on cuda/tensorrt, 512 on cpu, where a shape compiles nothing and batch 2 x 8192 needs gigabytes), or a number")
	fs.StringVar(&f.warmStrict, "warmup-strict", "auto", "a warm-up shape that fails is a start failure (exit 1): on, off (warn, skip it: the JIT guard's ceiling is what did warm), or auto (on for cuda and tensorrt, off for cpu)")
	fs.AutoBoolVar(&f.probe, "probe", "auto", "time a few shapes at start and fit the packing cost model: auto (on for cuda/tensorrt; on cpu the model is fitted from the runs themselves), true or false")
	fs.DurationVar(&f.maxChunkLatency, "max-chunk-latency", engine.DefaultMaxChunkLatency, "cap on the modelled run time of a bulk chunk, so a request waits at most about one chunk (0: the default; negative: no cap)")
	fs.StringVar(&f.memoryBudget, "memory-budget", "auto", "workspace budget of all sessions' chunks and warm-up shapes, e.g. 2GiB: longer texts are cut (or fail text_too_long); auto: half the available memory on cpu, off on gpu providers; off")
	fs.BoolVar(&f.cpuArena, "cpu-arena", false, "keep ONNX Runtime's CPU memory arena (faster on some shapes, but memory taken by a long text is never returned)")
	fs.StringVar(&f.engineCache, "trt-cache", "", "TensorRT engine cache directory (shared by the fleet)")
	fs.BoolVar(&f.fp16, "fp16", false, "TensorRT: build FP16 engines")
	fs.IntVar(&f.gpuMemMiB, "gpu-mem-limit", 0, "CUDA and TensorRT: cap of the CUDA memory arena per session, in MiB (0: no cap)")
	fs.StringVar(&f.cudaArena, "cuda-arena", "", "CUDA arena growth: kNextPowerOfTwo (ORT's default) or kSameAsRequested (less waste with many shapes)")
	fs.IntVar(&f.trtWorkspaceMiB, "trt-workspace", 0, "TensorRT: builder workspace cap in MiB (0: TensorRT's default)")
	fs.BoolVar(&f.trtProfile, "trt-profile", false, "TensorRT: one engine whose optimization profile spans the warm-up grid (min: smallest shape, opt and max: largest) instead of an engine per shape; chunks outside the grid then fail, so keep --max-batch and --max-tokens inside it")
	fs.StringVar(&f.attention, "attention", "auto", "how attention runs: fused (the model's attention blocks rewritten at load into ONNX Runtime's MultiHeadAttention, which never holds the heads x S x S scores; kept only if a canary run agrees with the graph within 1e-4), graph (as exported), or auto (fused on cpu when ORT's flash kernel can run there, graph on cuda and tensorrt; tensorrt refuses fused)")
	fs.StringVar(&f.precision, "precision", "fp32", "arithmetic of the encoder's linear layers: fp32, or int8 (cpu: rewritten at load with weights per output channel and activations per token row, so a text's vector never depends on its batch; kept only if a canary against fp32 holds the fidelity gates, else fp32 with a warning; cuda and tensorrt run fp32 with a warning; a graph already quantized, chosen with --model-file, runs as it is)")
	return f
}

// engineConfig is the engine flags parsed: what opening the engine takes.
type engineConfig struct {
	// Model is --model; ModelOptions the manifest and pin flags.
	Model        string
	ModelOptions model.Options
	// ORTLib is the ONNX Runtime library (--ort-lib).
	ORTLib   string
	Engine   engine.Config
	Provider ort.Provider
	// TRTProfile makes the TensorRT profile span the warm-up grid.
	TRTProfile bool
	// BudgetNote says how the memory budget was chosen.
	BudgetNote string
}

// opened is an engine open made, with what it loaded beside it.
type opened struct {
	engine *engine.Engine
	model  *model.Model
	tok    *tokenizer.Tokenizer
	// attention says how attention runs, precision the arithmetic.
	attention, precision string
}

// config turns the flags into an engine configuration; it reads the
// flags and changes nothing.
func (f *engineFlags) config() (engineConfig, error) {
	c := engineConfig{Model: f.modelDir, ORTLib: f.ortLib, TRTProfile: f.trtProfile}
	p := ort.Provider{Kind: ort.Kind(f.provider), IntraOpThreads: f.threads, DeviceID: f.device, CPUArena: f.cpuArena,
		GPUMemLimit: int64(f.gpuMemMiB) << 20, ArenaExtendStrategy: f.cudaArena,
		EngineCacheDir: f.engineCache, TimingCacheDir: f.engineCache, FP16: f.fp16,
		MaxWorkspaceBytes: int64(f.trtWorkspaceMiB) << 20}
	if f.trtProfile && p.Kind != ort.TensorRT {
		return c, fmt.Errorf("%w: --trt-profile needs --provider tensorrt", errUsage)
	}
	var err error
	if p.Attention, err = ort.ParseAttention(f.attention); err != nil {
		return c, fmt.Errorf("%w: --attention: %w", errUsage, err)
	}
	if p.Precision, err = ort.ParsePrecision(f.precision); err != nil {
		return c, fmt.Errorf("%w: --precision: %w", errUsage, err)
	}
	if err := p.Validate(); err != nil {
		return c, fmt.Errorf("%w: --provider: %w", errUsage, err)
	}
	c.Provider = p
	if c.ModelOptions, err = f.modelOptions(); err != nil {
		return c, err
	}
	cpu := p.CPUProvider()
	cfg := engine.Config{
		Sessions: f.sessions, MaxTokens: f.maxTokens, MaxBatchTokens: f.maxBatchTokens,
		MaxBatch: f.maxBatch, AdmissionTokens: f.admission, GuardSeq: f.guardSeq,
		BreakerThreshold: f.breaker, MaxChunkLatency: f.maxChunkLatency,
	}
	cfg.Probe = f.probe == "true" || f.probe == "auto" && !cpu
	if cfg.MemoryBudget, c.BudgetNote, err = memoryBudget(f.memoryBudget, cpu); err != nil {
		return c, err
	}
	switch f.guard {
	case "auto":
		cfg.Guard = p.Kind == ort.TensorRT
	case "on":
		cfg.Guard = true
	case "off":
	default:
		return c, fmt.Errorf("%w: --guard %q (want auto, on or off)", errUsage, f.guard)
	}
	switch f.warmStrict {
	case "auto":
		cfg.WarmupBestEffort = p.Kind == ort.CPU
	case "on":
	case "off":
		cfg.WarmupBestEffort = true
	default:
		return c, fmt.Errorf("%w: --warmup-strict %q (want auto, on or off)", errUsage, f.warmStrict)
	}
	if cfg.Tiers, err = ints("tiers", f.tiers); err != nil {
		return c, err
	}
	// Tiers only where a provider compiles shapes, or where the JIT guard
	// and the fleet's shape records name them.
	cfg.PadExact = cpu && len(cfg.Tiers) == 0 && !cfg.Guard
	if err := f.warmup(&cfg, p.Kind); err != nil {
		return c, err
	}
	c.Engine = cfg
	return c, nil
}

// warmup sets the warm-up grid of cfg from the --warmup-* flags: none by
// default on CPU (no JIT to warm), batches 1 and 2 elsewhere.
func (f *engineFlags) warmup(cfg *engine.Config, kind ort.Kind) error {
	wb := f.warmBatches
	if wb == "auto" {
		wb = ""
		if kind != ort.CPU && kind != "" {
			wb = "1,2"
		}
	}
	batches, err := ints("warmup-batches", wb)
	if err != nil {
		return err
	}
	seqs, err := ints("warmup-seqs", f.warmSq)
	if err != nil {
		return err
	}
	// Without --warmup-seqs the engine warms every tier up to the model's
	// maximum (or --warmup-max-seq) at these batch sizes.
	cfg.NoWarmup, cfg.WarmupBatches = len(batches) == 0, batches
	switch f.warmMaxSeq {
	case "auto":
		if kind == ort.CPU {
			cfg.WarmupMaxSeq = cpuWarmupMaxSeq
		}
	default:
		n, err := strconv.Atoi(f.warmMaxSeq)
		if err != nil || n < 1 {
			return fmt.Errorf("%w: --warmup-max-seq %q (want auto or a positive number)", errUsage, f.warmMaxSeq)
		}
		cfg.WarmupMaxSeq = n
	}
	for _, s := range seqs {
		for _, b := range batches {
			cfg.Warmup = append(cfg.Warmup, engine.Shape{Batch: b, Seq: s})
		}
	}
	return nil
}

// cpuWarmupMaxSeq caps the default CPU warm-up grid: enough to prove the
// session and grow its arenas for common lengths without holding the
// attention scores of the longest shapes.
const cpuWarmupMaxSeq = 512

// open loads the model, the tokenizer and the sessions and returns a ready
// engine (warm-up done); what it says about the model goes to warn. The
// caller closes the engine.
func (c engineConfig) open(ctx context.Context, warn io.Writer) (opened, error) {
	if c.Model == "" {
		return opened{}, fmt.Errorf("%w: --model is required", errUsage)
	}
	cfg, prov := c.Engine, c.Provider
	if _, err := ort.Init(ort.LibraryOptions{Path: c.ORTLib}); err != nil {
		return opened{}, err
	}
	m, err := model.Open(c.Model, c.ModelOptions)
	if err != nil {
		return opened{}, err
	}
	fmt.Fprintf(warn, "jetembed: %s\n", modelLine(m))
	tok, err := tokenizer.Load(m.TokenizerPath)
	if err != nil {
		return opened{}, err
	}
	if unk, ok := tok.TokenToID("<unk>"); ok {
		cfg.SparseSkip = []int32{unk}
	}
	if c.TRTProfile {
		if prov.Profile, err = gridProfile(cfg.WithDefaults(m.Config.MaxTokens).Warmup); err != nil {
			return opened{}, fmt.Errorf("%w: --trt-profile: %w", errUsage, err)
		}
	}
	plan, err := planAttention(m, prov, &cfg, warn)
	if err != nil {
		return opened{}, err
	}
	e, err := engine.New(ctx, cfg, engine.TokenizerFunc(tok.EncodeIDs), m, func(session int) (engine.Runner, error) {
		p := prov
		if p.Kind == ort.CUDA || p.Kind == ort.TensorRT {
			p.DeviceID += session
		}
		r, err := ort.Open(m, p)
		if err == nil && testRunner != nil {
			return testRunner(session, r), nil
		}
		return r, err
	})
	if err != nil {
		return opened{}, err
	}
	for _, err := range e.WarmupFailures() {
		fmt.Fprintf(warn, "jetembed: warning: %v (--warmup-strict=off: serving without it)\n", err)
	}
	return opened{engine: e, model: m, tok: tok, attention: plan, precision: cfg.Precision.String()}, nil
}

// planAttention decides how the sessions compute attention (the rewrite
// and its canary run once, here, before the engine sizes its memory
// model), says so on warn and returns how attention runs.
func planAttention(m *model.Model, prov ort.Provider, cfg *engine.Config, warn io.Writer) (string, error) {
	plan, err := ort.PlanAttention(m, prov)
	if err != nil {
		return "", err
	}
	if plan.Fused {
		cfg.Attention = engine.AttentionFused
	}
	if plan.Precision.Int8 {
		cfg.Precision = engine.PrecisionInt8
	}
	line := func(warned bool, s fmt.Stringer) {
		prefix := "jetembed: "
		if warned {
			prefix = "jetembed: warning: "
		}
		fmt.Fprintf(warn, "%s%s\n", prefix, s)
	}
	line(plan.Warn, plan)
	line(plan.Precision.Warn, plan.Precision)
	return cfg.Attention.String(), nil
}

// modelOptions are the model flags as [model.Options].
func (f *engineFlags) modelOptions() (model.Options, error) {
	if f.verify && f.noVerify {
		return model.Options{}, fmt.Errorf("%w: --verify and --no-verify contradict each other", errUsage)
	}
	return model.Options{SHA256: f.modelSHA, File: f.modelFile, VerifyManifest: f.verify, CheckManifest: !f.noVerify}, nil
}

// modelLine is what a command prints about its model at start: its id,
// where it came from and the digest of every file it read.
func modelLine(m *model.Model) string {
	var b strings.Builder
	fmt.Fprintf(&b, "model %s from %s", m.ID, m.Dir)
	if m.Source.RepoID != "" {
		fmt.Fprintf(&b, " (%s", m.Source.RepoID)
		if m.Source.Revision != "" {
			fmt.Fprintf(&b, "@%s", m.Source.Revision)
		}
		if m.Source.Commit != "" {
			fmt.Fprintf(&b, ", snapshot %s", m.Source.Commit)
		}
		b.WriteString(")")
	}
	fmt.Fprintf(&b, ", %s layout; manifest %s", m.Layout, m.Manifest)
	switch m.Manifest {
	case model.ManifestAbsent:
		b.WriteString(" (jetembed model lock writes one, --verify requires it)")
	case model.ManifestChecked:
		b.WriteString(" (the files it lists match)")
	}
	b.WriteString("; sha256")
	for i, fl := range m.Files {
		sep := ","
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(&b, "%s %s %s", sep, fl.Path, fl.SHA256)
	}
	return b.String()
}

// testRunner, when set (by tests only), wraps every session's runner: the
// way tests put a failing runner under a real command.
var testRunner func(session int, r engine.Runner) engine.Runner

// gridProfile is the TensorRT optimization profile spanning a warm-up grid.
func gridProfile(grid []engine.Shape) (*ort.Profile, error) {
	var batches, seqs []int
	for _, sh := range grid {
		batches, seqs = append(batches, sh.Batch), append(seqs, sh.Seq)
	}
	p, err := ort.GridProfile(batches, seqs)
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// ints parses a comma-separated list of positive integers.
func ints(flag, s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		n, err := strconv.Atoi(part)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%w: --%s: %q is not a positive integer", errUsage, flag, part)
		}
		out = append(out, n)
	}
	return out, nil
}

// tokenizeFunc is the tokenize endpoint's view of the tokenizer open
// loaded, cut at maxTokens as the engine cuts.
func (o opened) tokenizeFunc(maxTokens int) jetstream.Tokenizer {
	tok := o.tok
	special := map[int32]bool{}
	for _, id := range tok.SpecialIDs() {
		special[id] = true
	}
	return func(text string, addSpecial bool) ([]uint32, []string, []bool, int) {
		e := tok.Encode(text, tokenizer.Options{AddSpecialTokens: addSpecial, MaxTokens: maxTokens})
		ids, toks, sp := make([]uint32, len(e.IDs)), make([]string, len(e.IDs)), make([]bool, len(e.IDs))
		for i, id := range e.IDs {
			ids[i] = uint32(id)
			toks[i], _ = tok.IDToToken(id)
			sp[i] = special[id]
		}
		return ids, toks, sp, e.Count
	}
}
