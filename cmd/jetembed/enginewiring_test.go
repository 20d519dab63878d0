package main

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/ort"
)

// parseEngineFlags parses args as a warmup-like command's engine flags.
func parseEngineFlags(t *testing.T, args ...string) *engineFlags {
	t.Helper()
	fs := newFlagSet("test", stdio{in: strings.NewReader(""), out: io.Discard, err: io.Discard})
	f := addEngineFlags(fs, true)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestEngineFlagsProvider checks that every GPU provider option of the
// command line reaches the ort.Provider, in the units the flags promise.
func TestEngineFlagsProvider(t *testing.T) {
	f := parseEngineFlags(t, "--provider", "tensorrt", "--device", "1", "--gpu-mem-limit", "2048",
		"--cuda-arena", "kSameAsRequested", "--trt-workspace", "512", "--trt-cache", "/cache", "--fp16",
		"--engine-admission-tokens", "70000", "--warmup-batches", "1,4", "--warmup-seqs", "16,256")
	c, err := f.config()
	if err != nil {
		t.Fatal(err)
	}
	cfg, p := c.Engine, c.Provider
	want := ort.Provider{Kind: ort.TensorRT, DeviceID: 1, GPUMemLimit: 2 << 30, ArenaExtendStrategy: "kSameAsRequested",
		EngineCacheDir: "/cache", TimingCacheDir: "/cache", FP16: true, MaxWorkspaceBytes: 512 << 20, Attention: ort.AttentionAuto, Precision: ort.PrecisionFP32}
	if p != want {
		t.Errorf("provider %+v\nwant     %+v", p, want)
	}
	// int8 reaches the provider (a GPU one runs fp32 with a warning at
	// load); an unknown precision is a usage error.
	if c, err := parseEngineFlags(t, "--precision", "int8").config(); err != nil || c.Provider.Precision != ort.PrecisionInt8 {
		t.Errorf("--precision int8: %v, %q", err, c.Provider.Precision)
	}
	if _, err := parseEngineFlags(t, "--precision", "int4").config(); !errors.Is(err, errUsage) {
		t.Errorf("--precision int4: %v", err)
	}
	if cfg.AdmissionTokens != 70000 || !cfg.Guard {
		t.Errorf("config %+v: want admission 70000 and the guard on for tensorrt", cfg)
	}
	if len(cfg.Warmup) != 4 || cfg.WarmupBatches[1] != 4 {
		t.Errorf("warm-up %v batches %v", cfg.Warmup, cfg.WarmupBatches)
	}
}

func TestEngineFlagsErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--cuda-arena", "kWhatever", "--provider", "cuda"},
		{"--gpu-mem-limit", "-1", "--provider", "cuda"},
		{"--trt-profile"}, // cpu
		{"--provider", "rocm"},
		{"--guard", "maybe"},
		{"--warmup-seqs", "8,x"},
	} {
		if _, err := parseEngineFlags(t, args...).config(); !errors.Is(err, errUsage) {
			t.Errorf("%q: err %v, want a usage error", args, err)
		}
	}
}

// TestGridProfileOfDefaultGrid checks the TensorRT profile --trt-profile builds from the
// engine's default warm-up grid: the smallest and the largest warmed shape.
func TestGridProfileOfDefaultGrid(t *testing.T) {
	grid := engine.Config{MaxTokens: 512, WarmupBatches: []int{2, 1}}.WithDefaults(8192).Warmup
	p, err := gridProfile(grid)
	if err != nil {
		t.Fatal(err)
	}
	want := ort.Profile{Min: ort.Shape{Batch: 1, Seq: 8}, Opt: ort.Shape{Batch: 2, Seq: 512}, Max: ort.Shape{Batch: 2, Seq: 512}}
	if *p != want {
		t.Errorf("profile %+v, want %+v", *p, want)
	}
	if _, err := gridProfile(nil); !errors.Is(err, ort.ErrProvider) {
		t.Errorf("no warm-up grid: %v, want ErrProvider", err)
	}
}

// TestGPUProviderHardFailure asks a CPU-only ONNX Runtime for the GPU
// providers: start-up must fail naming the provider, never fall back to CPU.
func TestGPUProviderHardFailure(t *testing.T) {
	dir := tinyModel(t, "tiny-hidden")
	for _, p := range []string{"cuda", "tensorrt"} {
		code, out, errOut := run(t, `{"text":"hello"}`+"\n", "embed", "--model", dir, "--provider", p)
		if code == 0 || out != "" || !strings.Contains(strings.ToLower(errOut), p) {
			t.Errorf("--provider %s: exit %d, out %q, err %q; want a start-up error naming it", p, code, out, errOut)
		}
	}
}
