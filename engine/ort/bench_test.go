//go:build cgo

package ort

import (
	"context"
	"math"
	"os"
	"testing"
	"time"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/jetembed/jetembed/engine/model"
)

// benchModels are the committed tiny models and, when JETEMBED_BENCH_MODEL
// names a model directory, that one too.
func benchModels() map[string]string {
	dirs := map[string]string{
		"tiny-hidden": testdataModel("tiny-hidden"),
		"tiny-heads":  testdataModel("tiny-heads"),
	}
	if d := os.Getenv("JETEMBED_BENCH_MODEL"); d != "" {
		dirs["bench"] = d
	}
	return dirs
}

var benchShapes = []Shape{{1, 32}, {8, 128}, {4, 512}}

// BenchmarkSessionRun measures Session.Run, tensor set-up and output
// handling included, in tokens/s.
func BenchmarkSessionRun(b *testing.B) {
	for name, dir := range benchModels() {
		for _, sh := range benchShapes {
			b.Run(name+"/"+sh.String(), func(b *testing.B) {
				sess, _ := openDir(b, dir, Provider{IntraOpThreads: 1})
				in := input(sh.Batch, sh.Seq, fullLens(sh))
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					if _, err := sess.Run(ctx, in); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*sh.Batch*sh.Seq)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
	}
}

// BenchmarkBareRun is the baseline for BenchmarkSessionRun: a bare ORT run
// loop over tensors made once, outputs allocated by ORT.
func BenchmarkBareRun(b *testing.B) {
	for name, dir := range benchModels() {
		for _, sh := range benchShapes {
			b.Run(name+"/"+sh.String(), func(b *testing.B) {
				initORT(b)
				m, err := model.Open(dir, model.Options{})
				must(b, err)
				run := bareRunner(b, m, sh)
				b.ReportAllocs()
				for b.Loop() {
					run()
				}
				b.ReportMetric(float64(b.N*sh.Batch*sh.Seq)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
	}
}

// bareRunner opens a plain onnxruntime_go session on m (one intra-op
// thread, like the benchmarked Session) with full-length inputs of shape
// sh made once, and returns one run of it; the session is destroyed with b.
func bareRunner(b *testing.B, m *model.Model, sh Shape) func() {
	so, err := ort.NewSessionOptions()
	must(b, err)
	must(b, so.SetIntraOpNumThreads(1))
	sess, err := ort.NewDynamicAdvancedSession(m.ONNXPath,
		[]string{model.InputIDs, model.InputMask}, m.Layout.Outputs(), so)
	must(b, err)
	b.Cleanup(func() { _ = sess.Destroy() })
	in := input(sh.Batch, sh.Seq, fullLens(sh))
	ids, err := ort.NewTensor(ort.NewShape(int64(sh.Batch), int64(sh.Seq)), in.IDs)
	must(b, err)
	mask, err := ort.NewTensor(ort.NewShape(int64(sh.Batch), int64(sh.Seq)), in.Mask)
	must(b, err)
	outs := make([]ort.Value, len(m.Layout.Outputs()))
	return func() {
		clear(outs)
		if err := sess.Run([]ort.Value{ids, mask}, outs); err != nil {
			b.Fatal(err)
		}
		for _, o := range outs {
			o.Destroy()
		}
	}
}

func fullLens(sh Shape) []int {
	lens := make([]int, sh.Batch)
	for i := range lens {
		lens[i] = sh.Seq
	}
	return lens
}

// BenchmarkSessionOverhead alternates a bare ORT run and Session.Run on the
// same input and reports the ratio of their fastest runs (the minimum
// filters out the noise of a shared machine): the session's cost above ORT
// itself, which should stay within 5%.
func BenchmarkSessionOverhead(b *testing.B) {
	for name, dir := range benchModels() {
		for _, sh := range benchShapes {
			b.Run(name+"/"+sh.String(), func(b *testing.B) {
				sess, m := openDir(b, dir, Provider{IntraOpThreads: 1})
				bare := bareRunner(b, m, sh)
				in := input(sh.Batch, sh.Seq, fullLens(sh))
				ctx := context.Background()
				bareMin, sessMin := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
				for b.Loop() {
					start := time.Now()
					bare()
					bareMin = min(bareMin, time.Since(start))
					start = time.Now()
					if _, err := sess.Run(ctx, in); err != nil {
						b.Fatal(err)
					}
					sessMin = min(sessMin, time.Since(start))
				}
				b.ReportMetric(float64(bareMin.Microseconds()), "bare-min-µs")
				b.ReportMetric(float64(sessMin.Microseconds()), "session-min-µs")
				b.ReportMetric(float64(sessMin)/float64(bareMin), "session/bare")
			})
		}
	}
}
