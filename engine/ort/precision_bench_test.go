//go:build cgo

package ort

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/jetembed/jetembed/engine/model"
)

// BenchmarkPrecision runs the mixed corpus (in chunks of 8 texts of
// similar length) through float32 and int8 sessions of one thread, on the
// model JETEMBED_BENCH_MODEL names (the tiny one without it); int8-ew is
// the activations quantized elementwise instead of by QuantizeLinear.
func BenchmarkPrecision(b *testing.B) {
	dir := os.Getenv("JETEMBED_BENCH_MODEL")
	if dir == "" {
		dir = testdataModel("tiny-hidden")
	}
	texts := mixedCorpus(b)
	for _, form := range []string{"fp32", "int8", "int8-ew"} {
		b.Run(form, func(b *testing.B) {
			plans.mu.Lock()
			for _, sp := range plans.spare {
				sp.s.Close()
			}
			plans.m, plans.spare = nil, nil
			plans.mu.Unlock()
			saved := rewriteInt8
			defer func() { rewriteInt8 = saved }()
			if form == "int8-ew" {
				rewriteInt8 = func(path string, o model.Int8Options) (*model.Int8Rewrite, error) {
					o.Elementwise = true
					return model.RewriteInt8(path, o)
				}
			}
			initORT(b)
			m, err := model.Open(dir, model.DefaultOptions())
			must(b, err)
			pr := PrecisionFP32
			if form != "fp32" {
				pr = PrecisionInt8
			}
			s, err := Open(m, Provider{IntraOpThreads: 1, Precision: pr})
			must(b, err)
			defer s.Close()
			if got := s.Attention().Precision.Int8; got != (pr == PrecisionInt8) {
				b.Fatalf("int8 %v: %s", got, s.Attention().Precision)
			}
			chunks := corpusChunks(texts, m.Config.PadID)
			tokens := 0
			for _, in := range chunks {
				for _, x := range in.Mask {
					tokens += int(x)
				}
			}
			ctx := context.Background()
			for b.Loop() {
				for _, in := range chunks {
					if _, err := s.Run(ctx, in); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.N*tokens)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// TestPrecisionProfile prints, for float32 and int8 sessions of one
// thread on JETEMBED_BENCH_MODEL, the node time of one pass over the
// mixed corpus by operator: what int8 saves and what it adds.
func TestPrecisionProfile(t *testing.T) {
	dir := os.Getenv("JETEMBED_BENCH_MODEL")
	if dir == "" {
		t.Skip("JETEMBED_BENCH_MODEL is not set")
	}
	initORT(t)
	m, err := model.Open(dir, model.DefaultOptions())
	must(t, err)
	chunks := corpusChunks(mixedCorpus(t), m.Config.PadID)
	for _, form := range []string{"fp32", "int8", "int8-ew"} {
		var onnx []byte
		rw, err := model.RewriteAttention(m.ONNXPath, model.AttentionCPU)
		must(t, err)
		onnx = rw.ONNX
		if form != "fp32" {
			r8, err := model.RewriteInt8(m.ONNXPath, model.Int8Options{Attention: true, Elementwise: form == "int8-ew"})
			must(t, err)
			onnx = r8.ONNX
		}
		prefix := filepath.Join(t.TempDir(), "profile")
		s, err := newSession(m, Provider{IntraOpThreads: 1, CPUArena: os.Getenv("ARENA") != ""}, func(so *ort.SessionOptions, inputs, outputs []string) (*ort.DynamicAdvancedSession, error) {
			must(t, so.EnableProfiling(prefix))
			if os.Getenv("DAZ") != "" {
				must(t, so.AddSessionConfigEntry("session.set_denormal_as_zero", "1"))
			}
			must(t, so.AddSessionConfigEntry(folderKey, rw.DataDir))
			return ort.NewDynamicAdvancedSessionWithONNXData(onnx, inputs, outputs, so)
		})
		must(t, err)
		for _, in := range chunks {
			_, err := s.Run(context.Background(), in)
			must(t, err)
		}
		must(t, s.Close())
		files, _ := filepath.Glob(prefix + "*.json")
		b, err := os.ReadFile(files[0])
		must(t, err)
		var events []struct {
			Cat, Name string
			Dur       int64 `json:"dur"`
			Args      struct {
				OpName string                       `json:"op_name"`
				Output []map[string]json.RawMessage `json:"output_type_shape"`
			}
		}
		must(t, json.Unmarshal(b, &events))
		byOp, elems := map[string]int64{}, map[string]int64{}
		var total int64
		for _, e := range events {
			if e.Cat == "Node" && strings.HasSuffix(e.Name, "_kernel_time") {
				byOp[e.Args.OpName] += e.Dur
				total += e.Dur
				for _, o := range e.Args.Output {
					for _, dims := range o {
						var d []int64
						if json.Unmarshal(dims, &d) == nil {
							n := int64(1)
							for _, x := range d {
								n *= x
							}
							elems[e.Args.OpName] += n
						}
					}
				}
			}
		}
		ops := make([]string, 0, len(byOp))
		for op := range byOp {
			ops = append(ops, op)
		}
		slices.SortFunc(ops, func(a, b string) int { return cmp.Compare(byOp[b], byOp[a]) })
		var line strings.Builder
		for _, op := range ops[:min(10, len(ops))] {
			fmt.Fprintf(&line, " %s %.1f%% (%.2f ns/output value)", op, 100*float64(byOp[op])/float64(total), 1e3*float64(byOp[op])/float64(max(elems[op], 1)))
		}
		t.Logf("%s: %.1f ms node time:%s", form, float64(total)/1e3, line.String())
	}
}

// TestPrecisionCPU prints the CPU time of one thread running the mixed
// corpus through float32 and the int8 forms on JETEMBED_BENCH_MODEL (best
// of 3 passes): on a machine other work keeps busy, CPU time is the
// figure wall time is not.
func TestPrecisionCPU(t *testing.T) {
	dir := os.Getenv("JETEMBED_BENCH_MODEL")
	if dir == "" {
		t.Skip("JETEMBED_BENCH_MODEL is not set")
	}
	initORT(t)
	m, err := model.Open(dir, model.DefaultOptions())
	must(t, err)
	chunks := corpusChunks(mixedCorpus(t), m.Config.PadID)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	threadCPU := func() time.Duration {
		var ru syscall.Rusage
		must(t, syscall.Getrusage(1, &ru)) // RUSAGE_THREAD
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var base time.Duration
	for _, form := range []string{"fp32", "int8", "int8-ew"} {
		rw, err := model.RewriteAttention(m.ONNXPath, model.AttentionCPU)
		must(t, err)
		onnx := rw.ONNX
		if form != "fp32" {
			r8, err := model.RewriteInt8(m.ONNXPath, model.Int8Options{Attention: true, Elementwise: form == "int8-ew"})
			must(t, err)
			onnx = r8.ONNX
		}
		s, err := newSession(m, Provider{IntraOpThreads: 1}, func(so *ort.SessionOptions, inputs, outputs []string) (*ort.DynamicAdvancedSession, error) {
			must(t, so.AddSessionConfigEntry(folderKey, rw.DataDir))
			return ort.NewDynamicAdvancedSessionWithONNXData(onnx, inputs, outputs, so)
		})
		must(t, err)
		best := time.Duration(math.MaxInt64)
		for range 4 {
			c0 := threadCPU()
			for _, in := range chunks {
				_, err := s.Run(context.Background(), in)
				must(t, err)
			}
			best = min(best, threadCPU()-c0)
		}
		must(t, s.Close())
		if form == "fp32" {
			base = best
		}
		t.Logf("%s: %.1f ms CPU a pass (fp32 / this: %.2fx)", form, float64(best)/1e6, float64(base)/float64(best))
	}
}
