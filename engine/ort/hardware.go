package ort

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// What a provider runs on, for the fleet: the GPU's compute capability
// names the shapes a TensorRT plan serves (plans do not move between SMs),
// and the hardware names the cost coefficients a probe measured.

// cpuSM is the SM token of the CPU provider.
const cpuSM = "cpu"

// CPUProvider reports whether p runs on the CPU (the empty Kind does).
func (p Provider) CPUProvider() bool { return p.Kind == CPU || p.Kind == "" }

// ComputeCapability is the SM of p's first GPU as nvidia-smi reports it
// ("8.9"), or "cpu" for the CPU provider.
func (p Provider) ComputeCapability(ctx context.Context) (string, error) {
	if p.CPUProvider() {
		return cpuSM, nil
	}
	return nvidiaSMI(ctx, "compute_cap", p.DeviceID)
}

// Hardware names what a cost probe's coefficients depend on besides the
// model and the SM: the provider, the CPU or GPU model, and the threads or
// the precision ("cpu-amd64-<model name>-t1", "tensorrt-<gpu>-fp16").
func (p Provider) Hardware(ctx context.Context) string {
	if p.CPUProvider() {
		return fmt.Sprintf("cpu-%s-%s-t%d", runtime.GOARCH, cpuModel(), p.IntraOpThreads)
	}
	gpu, err := nvidiaSMI(ctx, "name", p.DeviceID)
	if err != nil {
		gpu = "gpu"
	}
	prec := "fp32"
	if p.FP16 {
		prec = "fp16"
	}
	return string(p.Kind) + "-" + gpu + "-" + prec
}

// nvidiaSMI asks nvidia-smi one field of the GPU device.
func nvidiaSMI(ctx context.Context, field string, device int) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nvidia-smi", "--query-gpu="+field, "--format=csv,noheader", "--id="+strconv.Itoa(device)).Output()
	if err != nil {
		return "", fmt.Errorf("nvidia-smi --query-gpu=%s: %w", field, err)
	}
	v := strings.TrimSpace(string(out))
	if v == "" {
		return "", fmt.Errorf("nvidia-smi --query-gpu=%s: empty answer", field)
	}
	return v, nil
}

// cpuModel is the CPU's model name from /proc/cpuinfo, or "unknown".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return "unknown"
}
