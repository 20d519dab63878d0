package heads

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// randomHead returns a head with weights and hidden states of the scale a
// BGE-M3 layer produces (|w| ~ 1/sqrt(dim), |h| ~ 1), and a bias that is
// not negligible.
func randomHead(rng *rand.Rand, dim, cdim, rows int) (*Weights, []float32) {
	w := &Weights{Dim: dim, SparseW: make([]float32, dim), ColBERTDim: cdim,
		ColBERTW: make([]float32, cdim*dim), ColBERTB: make([]float32, cdim)}
	scale := 1 / math.Sqrt(float64(dim))
	for i := range w.ColBERTW {
		w.ColBERTW[i] = float32(rng.NormFloat64() * scale)
	}
	for i := range w.ColBERTB {
		w.ColBERTB[i] = float32(rng.NormFloat64() * 0.1)
	}
	hidden := make([]float32, rows*dim)
	for i := range hidden {
		hidden[i] = float32(rng.NormFloat64())
	}
	return w, hidden
}

// colbertReference is the definition, in float64: one dot product per
// output value, then the norm of each row.
func colbertReference(w *Weights, hidden []float32) []float32 {
	d, c := w.Dim, w.ColBERTDim
	var out []float32
	row := make([]float64, c)
	for r := 0; r+d <= len(hidden); r += d {
		var ss float64
		for k := range c {
			s := float64(w.ColBERTB[k])
			for i := range d {
				s += float64(w.ColBERTW[k*d+i]) * float64(hidden[r+i])
			}
			row[k] = s
			ss += s * s
		}
		inv := 1.0
		if n := math.Sqrt(ss); n >= 1e-12 {
			inv = 1 / n
		}
		for _, v := range row {
			out = append(out, float32(v*inv))
		}
	}
	return out
}

// colbertPerToken is the head as it was before the GEMM (commit cd99c9b):
// four tokens share each pass over the weights, one dot product per output
// value. It is the "before" of BenchmarkColBERT and a second reference.
func colbertPerToken(w *Weights, dst, hidden []float32) []float32 {
	d, c := w.Dim, w.ColBERTDim
	rows := len(hidden) / d
	start := len(dst)
	dst = slices.Grow(dst, rows*c)[:start+rows*c]
	out := dst[start:]
	r := 0
	for ; r+4 <= rows; r += 4 {
		h0, h1 := hidden[r*d:(r+1)*d], hidden[(r+1)*d:(r+2)*d]
		h2, h3 := hidden[(r+2)*d:(r+3)*d], hidden[(r+3)*d:(r+4)*d]
		for k := 0; k < c; k++ {
			b0, b1, b2, b3 := dot4(w.ColBERTW[k*d:(k+1)*d], h0, h1, h2, h3)
			bias := w.ColBERTB[k]
			out[r*c+k], out[(r+1)*c+k] = b0+bias, b1+bias
			out[(r+2)*c+k], out[(r+3)*c+k] = b2+bias, b3+bias
		}
	}
	for ; r < rows; r++ {
		h := hidden[r*d : (r+1)*d]
		for k := 0; k < c; k++ {
			out[r*c+k] = dot(w.ColBERTW[k*d:(k+1)*d], h) + w.ColBERTB[k]
		}
	}
	for r := 0; r < rows; r++ {
		Normalize(out[r*c : (r+1)*c])
	}
	return dst
}

// dot4 returns the inner products of w with four vectors at once.
func dot4(w, h0, h1, h2, h3 []float32) (s0, s1, s2, s3 float32) {
	h0, h1, h2, h3 = h0[:len(w)], h1[:len(w)], h2[:len(w)], h3[:len(w)]
	for i, x := range w {
		s0 += x * h0[i]
		s1 += x * h1[i]
		s2 += x * h2[i]
		s3 += x * h3[i]
	}
	return s0, s1, s2, s3
}

// maxDiff returns the largest absolute difference; the rows are unit
// vectors, so it is also the error relative to the norm.
func maxDiff(t *testing.T, got, want []float32) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d values, want %d", len(got), len(want))
	}
	var m float64
	for i := range got {
		m = max(m, math.Abs(float64(got[i])-float64(want[i])))
	}
	return m
}

// TestColBERTReference holds the GEMM to the float64 definition, and to the
// per-token head it replaced, within 1e-5 of the unit norm. The shapes
// cross every tile edge: rows below, at and past tileRows, column counts
// that are not a multiple of tileCols, odd hidden sizes.
func TestColBERTReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	shapes := []struct{ dim, cdim, rows int }{
		{1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {64, 16, 64}, {100, 40, 129},
		{384, 384, 70}, {1024, 1024, 5}, {1024, 96, 200},
	}
	for _, kernel := range kernels(t) {
		useKernel = kernel
		for _, s := range shapes {
			for _, workers := range []int{0, 1, 3} {
				t.Run(fmt.Sprintf("kernel=%v/%dx%d/rows=%d/workers=%d", kernel, s.dim, s.cdim, s.rows, workers), func(t *testing.T) {
					w, hidden := randomHead(rng, s.dim, s.cdim, s.rows)
					w.Workers = workers
					prefix := []float32{42}
					got := w.ColBERT(prefix, hidden)
					if got[0] != 42 {
						t.Fatalf("ColBERT overwrote dst's existing value: %v", got[0])
					}
					got = got[1:]
					if d := maxDiff(t, got, colbertReference(w, hidden)); d > 1e-5 {
						t.Errorf("max difference from the float64 reference %g, want <= 1e-5", d)
					}
					if d := maxDiff(t, got, colbertPerToken(w, nil, hidden)); d > 1e-5 {
						t.Errorf("max difference from the per-token head %g, want <= 1e-5", d)
					}
				})
			}
		}
	}
}

// kernels lists the GEMM paths this machine can run (the assembly kernel
// and gonum, or gonum alone) and restores the default when the test ends.
func kernels(tb testing.TB) []bool {
	v := useKernel
	tb.Cleanup(func() { useKernel = v })
	if hasKernel {
		return []bool{true, false}
	}
	return []bool{false}
}

// TestColBERTNoAllocs checks that a call with a grown dst allocates
// nothing on the default (serial) path.
func TestColBERTNoAllocs(t *testing.T) {
	w, hidden := randomHead(rand.New(rand.NewPCG(3, 4)), 64, 48, 150)
	dst := w.ColBERT(nil, hidden)
	if n := testing.AllocsPerRun(10, func() { dst = w.ColBERT(dst[:0], hidden) }); n != 0 {
		t.Errorf("ColBERT allocated %v times per call, want 0", n)
	}
}

// BenchmarkColBERT measures the ColBERT head at BGE-M3's size (1024) and a
// small model's (384), for a short text and a long one: "kernel" and
// "gonum" are [Weights.ColBERT] on each GEMM path, "per-token" the head it
// replaced.
func BenchmarkColBERT(b *testing.B) {
	paths := kernels(b)
	for _, dim := range []int{384, 1024} {
		for _, tokens := range []int{128, 2048} {
			w, hidden := randomHead(rand.New(rand.NewPCG(5, 6)), dim, dim, tokens)
			run := func(name string, f func(dst, hidden []float32) []float32) {
				b.Run(fmt.Sprintf("dim=%d/tokens=%d/%s", dim, tokens, name), func(b *testing.B) {
					dst := f(nil, hidden)
					b.ReportAllocs()
					cpu := cpuTime()
					for b.Loop() {
						dst = f(dst[:0], hidden)
					}
					reportTokens(b, tokens, cpuTime()-cpu)
				})
			}
			for _, kernel := range paths {
				name := "gonum"
				if kernel {
					name = "kernel"
				}
				run(name, func(dst, h []float32) []float32 { useKernel = kernel; return w.ColBERT(dst, h) })
			}
			run("per-token", func(dst, h []float32) []float32 { return colbertPerToken(w, dst, h) })
			// Two workers, on this machine's cores, for hosts whose CPU is
			// idle (GPU hosts); it allocates a goroutine per call.
			w2 := *w
			w2.Workers = 2
			run("kernel-workers=2", func(dst, h []float32) []float32 { useKernel = hasKernel; return w2.ColBERT(dst, h) })
		}
	}
}

// TestColBERTRowIndependent checks that a row's output depends neither on
// the rows computed with it nor on Workers, bit for bit, on every path:
// the engine promises byte-identical vectors whatever the batch a text
// lands in.
func TestColBERTRowIndependent(t *testing.T) {
	const dim, cdim, rows = 100, 37, 71
	w, hidden := randomHead(rand.New(rand.NewPCG(11, 12)), dim, cdim, rows)
	for _, kernel := range kernels(t) {
		useKernel = kernel
		w.Workers = 1
		want := w.ColBERT(nil, hidden)
		for _, workers := range []int{1, 2, 3, 8} {
			w.Workers = workers
			if all := w.ColBERT(nil, hidden); !slices.Equal(all, want) {
				t.Errorf("kernel=%v workers=%d: batch differs from one worker's", kernel, workers)
			}
			for r := range rows {
				one := w.ColBERT(nil, hidden[r*dim:(r+1)*dim])
				if !slices.Equal(one, want[r*cdim:(r+1)*cdim]) {
					t.Errorf("kernel=%v workers=%d: row %d alone differs from row %d of the batch", kernel, workers, r, r)
				}
			}
		}
	}
}

// reportTokens reports tokens/s, and tokens per CPU second when the CPU
// time is known: with workers the two differ, and on a loaded machine the
// second is the steadier measure of the code.
func reportTokens(b *testing.B, tokens int, cpu time.Duration) {
	b.ReportMetric(float64(tokens*b.N)/b.Elapsed().Seconds(), "tokens/s")
	if cpu > 0 {
		b.ReportMetric(float64(tokens*b.N)/cpu.Seconds(), "tokens/cpu-s")
	}
}
