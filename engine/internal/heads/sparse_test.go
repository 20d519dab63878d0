package heads

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkSparseHead measures the sparse head of a hidden-state export:
// one dot product per token (TokenWeights), then the per-id max and sort
// (Sparse). It is a thousandth of the ColBERT head's arithmetic; this
// shows it stays negligible next to it.
func BenchmarkSparseHead(b *testing.B) {
	for _, dim := range []int{384, 1024} {
		for _, tokens := range []int{128, 2048} {
			rng := rand.New(rand.NewPCG(7, 8))
			w, hidden := randomHead(rng, dim, 1, tokens)
			for i := range w.SparseW {
				w.SparseW[i] = float32(rng.NormFloat64())
			}
			ids := make([]int32, tokens)
			for i := range ids {
				ids[i] = int32(rng.IntN(250000))
			}
			s := Sparser{Special: Special{0, 1, 2, 3}}
			b.Run(fmt.Sprintf("dim=%d/tokens=%d", dim, tokens), func(b *testing.B) {
				tw := w.TokenWeights(nil, hidden)
				sids, sws := s.Sparse(nil, nil, ids, tw)
				b.ReportAllocs()
				cpu := cpuTime()
				for b.Loop() {
					tw = w.TokenWeights(tw[:0], hidden)
					sids, sws = s.Sparse(sids[:0], sws[:0], ids, tw)
				}
				reportTokens(b, tokens, cpuTime()-cpu)
			})
		}
	}
}
