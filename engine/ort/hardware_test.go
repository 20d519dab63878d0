package ort

import (
	"context"
	"runtime"
	"strings"
	"testing"
)

func TestHardwareCPU(t *testing.T) {
	p := Provider{IntraOpThreads: 1}
	sm, err := p.ComputeCapability(context.Background())
	if err != nil || sm != "cpu" {
		t.Errorf("ComputeCapability = %q, %v; want cpu", sm, err)
	}
	hw := p.Hardware(context.Background())
	if !strings.HasPrefix(hw, "cpu-"+runtime.GOARCH+"-") || !strings.HasSuffix(hw, "-t1") {
		t.Errorf("Hardware = %q, want cpu-%s-<model>-t1", hw, runtime.GOARCH)
	}
}

// TestHardwareGPUWithoutNvidiaSMI: a GPU provider on a host without
// nvidia-smi has no compute capability to tell (an error naming the tool),
// and a hardware name that still says the provider and precision.
func TestHardwareGPUWithoutNvidiaSMI(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	p := Provider{Kind: TensorRT, FP16: true}
	if _, err := p.ComputeCapability(context.Background()); err == nil || !strings.Contains(err.Error(), "nvidia-smi") {
		t.Errorf("ComputeCapability err %v, want one naming nvidia-smi", err)
	}
	if hw := p.Hardware(context.Background()); hw != "tensorrt-gpu-fp16" {
		t.Errorf("Hardware = %q, want tensorrt-gpu-fp16", hw)
	}
}
