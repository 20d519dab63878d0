package engine

import (
	"context"
	"testing"
)

// cannedRunner returns one precomputed output: what is left to measure is
// the engine's own work around a session run.
type cannedRunner struct{ out RunOutput }

func (c cannedRunner) Run(context.Context, RunInput) (RunOutput, error) { return c.out, nil }
func (cannedRunner) Close() error                                       { return nil }

// BenchmarkEngineWork measures the engine's cost per call on a perfectly
// packed 32x128 chunk of a BGE-M3-sized (1024) three-head output, outside
// the session: tokenize lookup, admission, packing, dispatch, input layout,
// heads. Compare its ns/op with a session run of the same chunk.
func BenchmarkEngineWork(b *testing.B) {
	const batch, seq, dim = 32, 128, 1024
	ids := make([]int32, seq)
	for j := range ids {
		ids[j] = int32(5 + j)
	}
	ids[0], ids[seq-1] = 0, 2
	out := RunOutput{Dim: dim, ColBERTLen: seq - 1, ColBERTDim: dim,
		Dense: make([]float32, batch*dim), Sparse: make([]float32, batch*seq), ColBERT: make([]float32, batch*(seq-1)*dim)}
	for i := range out.Dense {
		out.Dense[i] = float32(i%7) + 1
	}
	for i := range out.Sparse {
		out.Sparse[i] = float32(i%5) / 10
	}
	m := fakeModel(seq)
	m.Config.HiddenSize = dim
	for _, tc := range []struct {
		name string
		want Output
	}{{"dense", Dense}, {"dense+sparse", Dense | Sparse}, {"all", Dense | Sparse | ColBERT}} {
		b.Run(tc.name, func(b *testing.B) {
			e, err := New(context.Background(), Config{NoWarmup: true, Tiers: []int{seq}, MaxBatch: batch},
				TokenizerFunc(func(string, int) ([]int32, int) { return ids, seq }), m,
				func(int) (Runner, error) { return cannedRunner{out}, nil })
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			texts := make([]Text, batch)
			for i := range texts {
				texts[i] = Text{Text: "x", Outputs: tc.want}
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := e.Embed(context.Background(), texts, Call{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
