package onnxgen

import (
	"github.com/jetembed/jetembed/internal/safetensors"
	"math"
)

// rng is SplitMix64 with Box-Muller normals. It is written out here rather
// than taken from math/rand so the weights (and so the model bytes) can
// never change with the Go version.
type rng struct{ state uint64 }

func (r *rng) next() uint64 {
	r.state += 0x9e3779b97f4a7c15
	z := r.state
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// uniform returns a value in (0, 1].
func (r *rng) uniform() float64 {
	return float64(r.next()>>11+1) / (1 << 53)
}

// normal returns one N(0, 1) sample (one Box-Muller draw per value: simpler
// than caching the pair, and speed does not matter here).
func (r *rng) normal() float64 {
	return math.Sqrt(-2*math.Log(r.uniform())) * math.Cos(2*math.Pi*r.uniform())
}

// fill returns n samples of N(mean, std), rounded to float32.
func (r *rng) fill(n int, mean, std float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(mean + std*r.normal())
	}
	return out
}

// initStd is the HF BERT/XLM-R initializer_range.
const initStd = 0.02

// lnNoise perturbs LayerNorm gamma (around 1) and beta (around 0) so the
// parameters are not the identity a real model never has.
const lnNoise = 0.05

// layerWeights are one encoder layer's parameters. Matrices are stored
// [in, out], ready for MatMul.
type layerWeights struct {
	q, k, v, o     []float32 // H x H
	qb, kb, vb, ob []float32 // H
	ln1g, ln1b     []float32 // H
	ffnIn          []float32 // H x I
	ffnInB         []float32 // I
	ffnOut         []float32 // I x H
	ffnOutB        []float32 // H
	ln2g, ln2b     []float32 // H
}

// weights are all parameters of a generated model. The heads are kept in
// the torch nn.Linear layout ([out, in]) of the BGE-M3 safetensors.
type weights struct {
	word     []float32 // V x H
	pos      []float32 // P x H
	tokType  []float32 // H (type_vocab_size 1: the one row is added everywhere)
	embLNg   []float32
	embLNb   []float32
	layers   []layerWeights
	sparseW  []float32 // 1 x H
	sparseB  []float32 // 1
	colbertW []float32 // C x H
	colbertB []float32 // C
}

// sparseBias shifts the sparse head so that relu keeps only some tokens:
// the pre-activation h·w has a spread of about initStd·√H for
// LayerNorm-scaled h (measured a little lower, ~0.08 for the tiny model),
// and a bias of a fifth of that leaves roughly a third of the positions
// positive.
func sparseBias(hidden int) float32 {
	return float32(-0.2 * initStd * math.Sqrt(float64(hidden)))
}

// newWeights draws every parameter from the seed, in a fixed order shared
// by both layouts: the same seed gives the same model in either layout.
func newWeights(s Size, vocab int, seed uint64) *weights {
	r := &rng{state: seed}
	h, in := s.Hidden, s.Intermediate
	w := &weights{
		word:    r.fill(vocab*h, 0, initStd),
		pos:     r.fill(s.MaxPositions*h, 0, initStd),
		tokType: r.fill(h, 0, initStd),
		embLNg:  r.fill(h, 1, lnNoise),
		embLNb:  r.fill(h, 0, lnNoise),
	}
	for range s.Layers {
		w.layers = append(w.layers, layerWeights{
			q: r.fill(h*h, 0, initStd), qb: r.fill(h, 0, initStd),
			k: r.fill(h*h, 0, initStd), kb: r.fill(h, 0, initStd),
			v: r.fill(h*h, 0, initStd), vb: r.fill(h, 0, initStd),
			o: r.fill(h*h, 0, initStd), ob: r.fill(h, 0, initStd),
			ln1g: r.fill(h, 1, lnNoise), ln1b: r.fill(h, 0, lnNoise),
			ffnIn: r.fill(h*in, 0, initStd), ffnInB: r.fill(in, 0, initStd),
			ffnOut: r.fill(in*h, 0, initStd), ffnOutB: r.fill(h, 0, initStd),
			ln2g: r.fill(h, 1, lnNoise), ln2b: r.fill(h, 0, lnNoise),
		})
	}
	w.sparseW = r.fill(h, 0, initStd)
	w.sparseB = []float32{sparseBias(h)}
	w.colbertW = r.fill(h*h, 0, initStd)
	w.colbertB = r.fill(h, 0, initStd)
	return w
}

// transpose returns the [cols, rows] transpose of a row-major [rows, cols]
// matrix.
func transpose(m []float32, rows, cols int) []float32 {
	out := make([]float32, len(m))
	for i := range rows {
		for j := range cols {
			out[j*rows+i] = m[i*cols+j]
		}
	}
	return out
}

// roundHalf rounds every value to float16 precision in place, so that an
// fp16 model and its float32 safetensors heads hold identical numbers.
func roundHalf(v []float32) {
	for i, x := range v {
		v[i] = safetensors.HalfToFloat(floatToHalf(x))
	}
}
