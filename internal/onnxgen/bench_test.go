//go:build cgo

package onnxgen

import (
	"fmt"
	"path/filepath"
	"testing"
)

// BenchmarkSmallForward measures the MiniLM-size model on one intra-op
// thread, the unit the CPU worker pool scales by. Run with
// `go test -run '^$' -bench SmallForward -benchmem ./internal/onnxgen`.
func BenchmarkSmallForward(b *testing.B) {
	needORT(b)
	dir := b.TempDir()
	if err := WriteDir(dir, Config{Size: Small, Layout: LayoutHidden, Seed: 42}, tokenizerForTests(b)); err != nil {
		b.Fatal(err)
	}
	s := openSession(b, filepath.Join(dir, "model.onnx"), LayoutHidden, 1)
	for _, shape := range [][2]int{{8, 128}, {1, 512}, {32, 32}} {
		batch, seq := shape[0], shape[1]
		b.Run(fmt.Sprintf("batch=%d/seq=%d", batch, seq), func(b *testing.B) {
			rows := make([][]int64, batch)
			for i := range rows {
				rows[i] = textIDs(seq, 8002, uint64(i))
			}
			s.run(b, rows) // first run allocates ORT's arena
			b.ResetTimer()
			for b.Loop() {
				s.run(b, rows)
			}
			b.ReportMetric(float64(batch*seq*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkBuildSmall measures generating the MiniLM-size model in memory.
func BenchmarkBuildSmall(b *testing.B) {
	for b.Loop() {
		if _, err := Build(Config{Size: Small, Layout: LayoutHidden, Seed: 42, VocabSize: 8002}); err != nil {
			b.Fatal(err)
		}
	}
}
