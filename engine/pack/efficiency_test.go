package pack

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// lognormalLengths draws n token counts from a lognormal mix: mostly short
// chunks around 100 tokens, a long tail up to 8192.
func lognormalLengths(r *rand.Rand, n int) []int {
	out := make([]int, n)
	for i := range out {
		l := int(math.Exp(4.6 + 1.1*r.NormFloat64()))
		out[i] = min(max(l, 10), 8192)
	}
	return out
}

// efficiency is real / padded tokens.
func efficiency(chunks []Chunk) float64 {
	real, padded := 0, 0
	for _, c := range chunks {
		real += c.RealTokens
		padded += c.PaddedTokens()
	}
	return float64(real) / float64(padded)
}

// arrivalEfficiency is what fixed batches of size in arrival order reach,
// each padded to its longest text.
func arrivalEfficiency(lengths []int, size int) float64 {
	real, padded := 0, 0
	for i := 0; i < len(lengths); i += size {
		batch := lengths[i:min(i+size, len(lengths))]
		longest := 0
		for _, n := range batch {
			real += n
			longest = max(longest, n)
		}
		padded += longest * len(batch)
	}
	return float64(real) / float64(padded)
}

func defaultTestConfig(steps int) Config {
	return Config{MaxTokens: 16384, MaxBatch: 64, Tiers: Tiers(8, 8192, steps)}
}

// TestPackingEfficiency holds the packer to its goal on a realistic mix:
// >= 0.90 real/padded with the default (4 steps an octave) tiers, where
// arrival-order batches of 32 waste most of the compute.
func TestPackingEfficiency(t *testing.T) {
	lengths := lognormalLengths(rand.New(rand.NewPCG(7, 7)), 4096)
	arrival := arrivalEfficiency(lengths, 32)
	for _, steps := range []int{1, 4} {
		p, err := New(defaultTestConfig(steps))
		if err != nil {
			t.Fatal(err)
		}
		chunks := p.Pack(lengths)
		eff := efficiency(chunks)
		t.Logf("tiers %d/octave: packer %.3f in %d chunks; arrival order batches of 32: %.3f", steps, eff, len(chunks), arrival)
		if steps == 4 && eff < 0.90 {
			t.Errorf("packer efficiency %.3f < 0.90", eff)
		}
		if eff <= arrival {
			t.Errorf("packer %.3f not better than arrival order %.3f", eff, arrival)
		}
	}
	if arrival > 0.5 {
		t.Errorf("arrival-order efficiency %.3f: the length mix is not realistic enough to test packing", arrival)
	}
}

func BenchmarkPack(b *testing.B) {
	for _, n := range []int{64, 1024} {
		lengths := lognormalLengths(rand.New(rand.NewPCG(3, 3)), n)
		p, err := New(defaultTestConfig(4))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("texts=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var chunks []Chunk
			for b.Loop() {
				chunks = p.Pack(lengths)
			}
			b.ReportMetric(efficiency(chunks), "real/padded")
			b.ReportMetric(arrivalEfficiency(lengths, 32), "arrival32-real/padded")
		})
	}
}
