package ort

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jetembed/jetembed/engine/model"
)

// Kind is an execution provider.
type Kind string

// The execution providers jetembed knows.
const (
	CPU      Kind = "cpu"
	CUDA     Kind = "cuda"
	TensorRT Kind = "tensorrt"
)

// Provider says where and how a session runs. The zero Provider is the CPU
// with ONNX Runtime's default thread pools.
type Provider struct {
	Kind     Kind // empty means CPU
	DeviceID int  // GPU ordinal (CUDA and TensorRT)

	// IntraOpThreads and InterOpThreads size ONNX Runtime's thread pools;
	// 0 keeps ORT's default (one intra-op thread per core).
	IntraOpThreads, InterOpThreads int

	// CPUArena keeps ONNX Runtime's CPU memory arena and memory patterns.
	// Off (the default), a long text's workspace goes back to the
	// allocator after its run instead of staying reserved for the life
	// of the session; see BENCHMARKS.md for what it costs.
	CPUArena bool

	// GPUMemLimit caps the CUDA arena in bytes; 0 means no limit.
	GPUMemLimit int64
	// ArenaExtendStrategy is "kNextPowerOfTwo" (ORT's default) or
	// "kSameAsRequested" (less waste with many shapes); empty keeps the
	// default.
	ArenaExtendStrategy string

	// EngineCacheDir, when set, keeps compiled TensorRT engines there, so a
	// restart (or a peer sharing the directory) skips the build.
	EngineCacheDir string
	// TimingCacheDir, when set, keeps TensorRT's layer timing cache there.
	TimingCacheDir    string
	FP16              bool
	MaxWorkspaceBytes int64 // 0 keeps TensorRT's default
	// Profile bounds the dynamic input shapes one TensorRT engine serves;
	// nil lets TensorRT build an engine per new shape.
	Profile *Profile
	// BuilderOptimizationLevel is TensorRT's 0-5 builder effort; 0 keeps
	// ORT's default (3).
	BuilderOptimizationLevel int

	// Attention is how sessions compute attention; empty means
	// [AttentionAuto].
	Attention Attention
	// Precision is the encoder's arithmetic; empty means
	// [PrecisionFP32]. int8 is for the CPU provider: CUDA and TensorRT
	// sessions run float32 and their plan says so with a warning.
	Precision Precision
}

// Shape is a (batch, sequence) input shape.
type Shape struct{ Batch, Seq int }

func (s Shape) String() string { return strconv.Itoa(s.Batch) + "x" + strconv.Itoa(s.Seq) }

// Profile is a TensorRT optimization profile: the engine accepts shapes
// from Min to Max and is tuned for Opt.
type Profile struct{ Min, Opt, Max Shape }

// GridProfile covers a warm-up grid of batch sizes and sequence lengths.
// Opt is the largest shape: it dominates run time, so it is the one worth
// tuning for.
func GridProfile(batches, seqs []int) (Profile, error) {
	if len(batches) == 0 || len(seqs) == 0 {
		return Profile{}, fmt.Errorf("%w: tensorrt profile needs batch sizes and sequence lengths", ErrProvider)
	}
	lo := Shape{slices.Min(batches), slices.Min(seqs)}
	hi := Shape{slices.Max(batches), slices.Max(seqs)}
	p := Profile{Min: lo, Opt: hi, Max: hi}
	return p, p.validate()
}

func (p Profile) validate() error {
	ok := p.Min.Batch >= 1 && p.Min.Seq >= 1 &&
		p.Min.Batch <= p.Opt.Batch && p.Opt.Batch <= p.Max.Batch &&
		p.Min.Seq <= p.Opt.Seq && p.Opt.Seq <= p.Max.Seq
	if !ok {
		return fmt.Errorf("%w: tensorrt profile min %v, opt %v, max %v is not ordered 1 <= min <= opt <= max",
			ErrProvider, p.Min, p.Opt, p.Max)
	}
	return nil
}

// shapes is the value of trt_profile_*_shapes: every graph input at s
// (input_ids and attention_mask when inputs is empty).
func (s Shape) shapes(inputs []string) string {
	if len(inputs) == 0 {
		inputs = []string{model.InputIDs, model.InputMask}
	}
	parts := make([]string, len(inputs))
	for i, in := range inputs {
		parts[i] = in + ":" + s.String()
	}
	return strings.Join(parts, ",")
}

func (p Provider) kind() Kind {
	if p.Kind == "" {
		return CPU
	}
	return p.Kind
}

// Validate checks p without touching ONNX Runtime.
func (p Provider) Validate() error {
	k := p.kind()
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrProvider, k, fmt.Sprintf(format, args...))
	}
	switch k {
	case CPU, CUDA, TensorRT:
	default:
		return fmt.Errorf("%w: unknown kind %q (want cpu, cuda or tensorrt)", ErrProvider, p.Kind)
	}
	switch {
	case p.DeviceID < 0:
		return fail("device id %d is negative", p.DeviceID)
	case p.IntraOpThreads < 0 || p.InterOpThreads < 0:
		return fail("thread counts %d/%d must not be negative", p.IntraOpThreads, p.InterOpThreads)
	case p.GPUMemLimit < 0:
		return fail("gpu memory limit %d is negative", p.GPUMemLimit)
	case p.MaxWorkspaceBytes < 0:
		return fail("max workspace %d is negative", p.MaxWorkspaceBytes)
	case p.BuilderOptimizationLevel < 0 || p.BuilderOptimizationLevel > 5:
		return fail("builder optimization level %d is outside 0-5", p.BuilderOptimizationLevel)
	}
	switch a := p.Attention.orAuto(); {
	case a != AttentionAuto && a != AttentionFused && a != AttentionGraph:
		return fail("attention %q (want auto, fused or graph)", p.Attention)
	case a == AttentionFused && k == TensorRT:
		return fail("attention fused: TensorRT fuses attention itself (use auto or graph)")
	}
	if pr := p.Precision.orFP32(); pr != PrecisionFP32 && pr != PrecisionInt8 {
		return fail("precision %q (want fp32 or int8)", p.Precision)
	}
	switch p.ArenaExtendStrategy {
	case "", "kNextPowerOfTwo", "kSameAsRequested":
	default:
		return fail("arena extend strategy %q (want kNextPowerOfTwo or kSameAsRequested)", p.ArenaExtendStrategy)
	}
	if p.Profile != nil {
		if err := p.Profile.validate(); err != nil {
			return err
		}
	}
	return nil
}

// cudaOptions are the CUDA provider's key/value options; TensorRT sessions
// register CUDA too, for the nodes TensorRT does not take.
func (p Provider) cudaOptions() map[string]string {
	o := map[string]string{"device_id": strconv.Itoa(p.DeviceID)}
	if p.GPUMemLimit > 0 {
		o["gpu_mem_limit"] = strconv.FormatInt(p.GPUMemLimit, 10)
	}
	if p.ArenaExtendStrategy != "" {
		o["arena_extend_strategy"] = p.ArenaExtendStrategy
	}
	return o
}

// tensorRTOptions are the TensorRT provider's key/value options
// (OrtTensorRTProviderOptionsV2 names); a profile spans the graph's inputs.
func (p Provider) tensorRTOptions(inputs ...string) map[string]string {
	o := map[string]string{"device_id": strconv.Itoa(p.DeviceID)}
	if p.EngineCacheDir != "" {
		o["trt_engine_cache_enable"] = "1"
		o["trt_engine_cache_path"] = p.EngineCacheDir
	}
	if p.TimingCacheDir != "" {
		o["trt_timing_cache_enable"] = "1"
		o["trt_timing_cache_path"] = p.TimingCacheDir
	}
	if p.FP16 {
		o["trt_fp16_enable"] = "1"
	}
	if p.MaxWorkspaceBytes > 0 {
		o["trt_max_workspace_size"] = strconv.FormatInt(p.MaxWorkspaceBytes, 10)
	}
	if p.Profile != nil {
		o["trt_profile_min_shapes"] = p.Profile.Min.shapes(inputs)
		o["trt_profile_opt_shapes"] = p.Profile.Opt.shapes(inputs)
		o["trt_profile_max_shapes"] = p.Profile.Max.shapes(inputs)
	}
	if p.BuilderOptimizationLevel > 0 {
		o["trt_builder_optimization_level"] = strconv.Itoa(p.BuilderOptimizationLevel)
	}
	return o
}

// String describes p for logs, e.g. "tensorrt:0 fp16".
func (p Provider) String() string {
	k := p.kind()
	if k == CPU {
		if p.IntraOpThreads > 0 {
			return fmt.Sprintf("cpu threads=%d", p.IntraOpThreads)
		}
		return "cpu"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d", k, p.DeviceID)
	if k == TensorRT && p.FP16 {
		b.WriteString(" fp16")
	}
	return b.String()
}
