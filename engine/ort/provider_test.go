package ort

import (
	"errors"
	"maps"
	"strings"
	"testing"
)

func TestCUDAOptions(t *testing.T) {
	tests := []struct {
		p    Provider
		want map[string]string
	}{
		{Provider{Kind: CUDA}, map[string]string{"device_id": "0"}},
		{Provider{Kind: CUDA, DeviceID: 2, GPUMemLimit: 4 << 30, ArenaExtendStrategy: "kSameAsRequested"},
			map[string]string{"device_id": "2", "gpu_mem_limit": "4294967296", "arena_extend_strategy": "kSameAsRequested"}},
	}
	for _, tt := range tests {
		if got := tt.p.cudaOptions(); !maps.Equal(got, tt.want) {
			t.Errorf("%+v: got %v, want %v", tt.p, got, tt.want)
		}
	}
}

func TestTensorRTOptions(t *testing.T) {
	prof, err := GridProfile([]int{1, 4, 16}, []int{8, 512, 64})
	if err != nil {
		t.Fatal(err)
	}
	p := Provider{
		Kind: TensorRT, DeviceID: 1,
		EngineCacheDir: "/cache/engines", TimingCacheDir: "/cache/timing",
		FP16: true, MaxWorkspaceBytes: 2 << 30, Profile: &prof, BuilderOptimizationLevel: 5,
	}
	want := map[string]string{
		"device_id":                      "1",
		"trt_engine_cache_enable":        "1",
		"trt_engine_cache_path":          "/cache/engines",
		"trt_timing_cache_enable":        "1",
		"trt_timing_cache_path":          "/cache/timing",
		"trt_fp16_enable":                "1",
		"trt_max_workspace_size":         "2147483648",
		"trt_profile_min_shapes":         "input_ids:1x8,attention_mask:1x8",
		"trt_profile_opt_shapes":         "input_ids:16x512,attention_mask:16x512",
		"trt_profile_max_shapes":         "input_ids:16x512,attention_mask:16x512",
		"trt_builder_optimization_level": "5",
	}
	if got := p.tensorRTOptions(); !maps.Equal(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	if got := (Provider{Kind: TensorRT}).tensorRTOptions(); !maps.Equal(got, map[string]string{"device_id": "0"}) {
		t.Errorf("defaults: %v", got)
	}
	// A BERT-family graph's profile spans its token type and position inputs too.
	got := p.tensorRTOptions("input_ids", "attention_mask", "token_type_ids", "position_ids")["trt_profile_max_shapes"]
	if want := "input_ids:16x512,attention_mask:16x512,token_type_ids:16x512,position_ids:16x512"; got != want {
		t.Errorf("profile of four inputs: %s, want %s", got, want)
	}
	if err := p.Validate(); err != nil {
		t.Errorf("valid provider: %v", err)
	}
}

func TestProviderValidate(t *testing.T) {
	bad := &Profile{Min: Shape{2, 8}, Opt: Shape{1, 8}, Max: Shape{4, 8}}
	tests := []struct {
		p    Provider
		want string // "" means valid
	}{
		{Provider{}, ""},
		{Provider{Kind: CPU, IntraOpThreads: 2, InterOpThreads: 1}, ""},
		{Provider{Kind: CUDA, ArenaExtendStrategy: "kNextPowerOfTwo"}, ""},
		{Provider{Kind: "rocm"}, `unknown kind "rocm"`},
		{Provider{Kind: CUDA, DeviceID: -1}, "device id -1"},
		{Provider{IntraOpThreads: -1}, "thread counts"},
		{Provider{Kind: CUDA, GPUMemLimit: -5}, "gpu memory limit"},
		{Provider{Kind: CUDA, ArenaExtendStrategy: "grow"}, "arena extend strategy"},
		{Provider{Kind: TensorRT, BuilderOptimizationLevel: 6}, "outside 0-5"},
		{Provider{Kind: TensorRT, MaxWorkspaceBytes: -1}, "max workspace"},
		{Provider{Kind: TensorRT, Profile: bad}, "not ordered"},
	}
	for _, tt := range tests {
		err := tt.p.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%+v: unexpected %v", tt.p, err)
		case tt.want != "" && (!errors.Is(err, ErrProvider) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%+v: err = %v, want ErrProvider mentioning %q", tt.p, err, tt.want)
		}
	}
}

func TestGridProfile(t *testing.T) {
	if _, err := GridProfile(nil, []int{8}); !errors.Is(err, ErrProvider) {
		t.Errorf("empty batches: %v", err)
	}
	if _, err := GridProfile([]int{0, 4}, []int{8}); !errors.Is(err, ErrProvider) {
		t.Errorf("zero batch: %v", err)
	}
	p, err := GridProfile([]int{8, 2}, []int{128, 16, 1024})
	want := Profile{Min: Shape{2, 16}, Opt: Shape{8, 1024}, Max: Shape{8, 1024}}
	if err != nil || p != want {
		t.Errorf("got %+v, %v; want %+v", p, err, want)
	}
}

func TestProviderString(t *testing.T) {
	for p, want := range map[*Provider]string{
		{}:                           "cpu",
		{IntraOpThreads: 4}:          "cpu threads=4",
		{Kind: CUDA, DeviceID: 1}:    "cuda:1",
		{Kind: TensorRT, FP16: true}: "tensorrt:0 fp16",
	} {
		if got := p.String(); got != want {
			t.Errorf("%+v: %q, want %q", *p, got, want)
		}
	}
}
