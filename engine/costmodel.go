package engine

import (
	"math"

	"github.com/jetembed/jetembed/engine/internal/pack"
	"github.com/jetembed/jetembed/engine/model"
)

// costModel is the scheduler's model of a chunk of B rows of S tokens:
// its run time R + A*B*S + Bq*B*S^2 seconds, and its workspace
// MemA*B*S + MemB*B*S^2 bytes. The run time starts from a prior derived
// from the model's size (or a probed or given [pack.Cost]) and is refitted
// from every run the sessions make, so the chunk shapes follow the
// hardware the engine actually runs on without a start-up probe.
//
// It is not safe for concurrent use; the scheduler holds its lock.
type costModel struct {
	r, a, bq   float64
	memA, memB float64

	// Relative least squares over (1, B*S, B*S^2): each run weighs
	// 1/seconds^2, so short chunks (where the per-run cost shows) count
	// as much as long ones. prior are pseudo-runs that keep the fit
	// anchored until real runs outweigh them; decay forgets old runs.
	xx    [3][3]float64
	xc    [3]float64
	cc    float64
	runs  int
	prior [3][3]float64
	pc    [3]float64
	pcc   float64
}

// flopsPerSecond is the prior's throughput of one session; the online fit
// replaces it within a few runs.
const flopsPerSecond = 2e10

// runPrior is the prior fixed cost of one session run, in seconds.
const runPrior = 2e-4

// priorWeight is the weight of each of the prior's pseudo-runs, in runs:
// small, so a prior off by a factor of five yields within a few runs, yet
// enough to decide the directions the runs do not (all one shape).
const priorWeight = 0.02

// decay is the weight a run keeps per later run (about the last 200 runs
// count).
const decay = 0.995

func newCostModel(c model.Config) *costModel {
	return newCostModelFor(c, AttentionGraph, PrecisionFP32)
}

// int8Speedup is the prior's speed-up of the linear layers in int8
// (MLAS's u8s8 kernels against its float32 ones; measured 2.5-3x on the
// linear layers alone with AVX-512 VNNI, so 2 also covers the CPUs
// without it); the online fit replaces it within a few runs.
const int8Speedup = 2

// newCostModelFor is the prior for sessions whose attention is a and
// arithmetic p.
func newCostModelFor(c model.Config, a Attention, p Precision) *costModel {
	// model.Open fills these; a hand-made Config may not.
	h := float64(max(c.HiddenSize, 1))
	l, in, heads := float64(c.Layers), float64(c.Intermediate), float64(c.Heads)
	if l <= 0 {
		l = 12
	}
	if in <= 0 {
		in = 4 * h
	}
	if heads <= 0 {
		heads = max(1, h/64)
	}
	m := &costModel{
		r:  runPrior,
		a:  2 * l * (4*h*h + 2*h*in) / flopsPerSecond,
		bq: 4 * l * h / flopsPerSecond,
		// float32 hidden states, q/k/v, attention output and two FFN
		// activations a token; about four copies of the attention scores
		// (scores, scaled and masked, softmax) a head and position pair.
		memA: 4 * (8*h + 2*in),
		memB: 16 * heads,
	}
	if a == AttentionFused {
		// No scores: the flash kernel's scratch is a few hundred KB a
		// thread whatever the length. A token holds more than in the
		// graph's count: q/k with their padding column, the kernel's
		// head-major copies of q/k/v, the GELU's temporaries, and what
		// the allocator keeps between them (measured: peak growth of 50
		// to 90 KB a token on the small model, h 384 and i 1536, at 1024
		// to 8192 tokens, batch 1 and 2; this counts 74).
		m.memA, m.memB = 4*(16*h+8*in), 0
	}
	if p == PrecisionInt8 {
		m.a /= int8Speedup
		// A linear layer's input scaled (float32) and quantized (uint8),
		// and its output before the row scale (float32), at the widest
		// layer (the feed-forward's): an estimate beside the measured
		// float32 figures, erring high.
		m.memA += 4*in + in + 4*in
	}
	m.setPrior()
	return m
}

// use installs a probed or given run-time model; the per-run cost keeps
// its prior, and runs keep refining all three.
func (m *costModel) use(c pack.Cost) {
	m.a, m.bq = c.A, c.Bq
	m.xx, m.xc, m.cc, m.runs = [3][3]float64{}, [3]float64{}, 0, 0
	m.setPrior()
}

// setPrior turns the current coefficients into pseudo-runs at a short, a
// medium and a long shape.
func (m *costModel) setPrior() {
	m.prior, m.pc, m.pcc = [3][3]float64{}, [3]float64{}, 0
	for _, sh := range []Shape{{1, 16}, {4, 128}, {1, 1024}} {
		x := features(sh.Batch, sh.Seq)
		c := m.seconds(sh.Batch, sh.Seq)
		w := priorWeight / (c * c)
		for i := range 3 {
			for j := range 3 {
				m.prior[i][j] += w * x[i] * x[j]
			}
			m.pc[i] += w * x[i] * c
		}
		m.pcc += w * c * c
	}
}

// features are the fit's regressors, scaled to similar magnitudes (B*S
// in thousands, B*S^2 in millions) so the normal equations stay well
// conditioned.
func features(b, s int) [3]float64 {
	bs := float64(b) * float64(s)
	return [3]float64{1, bs / featScale[1], bs * float64(s) / featScale[2]}
}

var featScale = [3]float64{1, 1e3, 1e6}

// seconds is the modelled run time of a batch x seq chunk.
func (m *costModel) seconds(b, s int) float64 {
	bs := float64(b) * float64(s)
	return m.r + m.a*bs + m.bq*bs*float64(s)
}

// bytes is the modelled workspace of a batch x seq chunk.
func (m *costModel) bytes(b, s int) float64 {
	bs := float64(b) * float64(s)
	return m.memA*bs + m.memB*bs*float64(s)
}

// maxSeq is the longest single text whose workspace fits budget bytes.
func (m *costModel) maxSeq(budget int64) int {
	if budget <= 0 {
		return math.MaxInt
	}
	// memB*S^2 + memA*S - budget = 0
	a, b, c := m.memB, m.memA, -float64(budget)
	var s float64
	if a == 0 {
		s = -c / b
	} else {
		s = (-b + math.Sqrt(b*b-4*a*c)) / (2 * a)
	}
	return int(s)
}

// observe adds a measured run and refits.
func (m *costModel) observe(b, s int, secs float64) {
	if secs <= 0 || b <= 0 || s <= 0 {
		return
	}
	x := features(b, s)
	w := 1 / (secs * secs)
	for i := range 3 {
		for j := range 3 {
			m.xx[i][j] = m.xx[i][j]*decay + w*x[i]*x[j]
		}
		m.xc[i] = m.xc[i]*decay + w*x[i]*secs
	}
	m.cc = m.cc*decay + w*secs*secs
	m.runs++
	m.refit()
}

// refit solves the weighted least squares with every coefficient kept
// non-negative: the full model if its solution is, else the best of the
// models with a term left out.
func (m *costModel) refit() {
	var xx [3][3]float64
	var xc [3]float64
	for i := range 3 {
		for j := range 3 {
			xx[i][j] = m.xx[i][j] + m.prior[i][j]
		}
		xc[i] = m.xc[i] + m.pc[i]
	}
	cc := m.cc + m.pcc
	best, bestRes := [3]float64{}, math.Inf(1)
	for _, terms := range [][]int{{0, 1, 2}, {0, 1}, {0, 2}, {1, 2}, {1}, {2}} {
		th, ok := solve(xx, xc, terms)
		if !ok {
			continue
		}
		res := cc
		for i := range 3 {
			res -= 2 * th[i] * xc[i]
			for j := range 3 {
				res += th[i] * xx[i][j] * th[j]
			}
		}
		if res < bestRes {
			best, bestRes = th, res
		}
	}
	if !math.IsInf(bestRes, 1) {
		m.r, m.a, m.bq = best[0], best[1]/featScale[1], best[2]/featScale[2]
	}
}

// solve solves the normal equations restricted to terms (the others
// zero) by Gaussian elimination; ok is false when the system is singular
// or a coefficient comes out negative.
func solve(xx [3][3]float64, xc [3]float64, terms []int) (th [3]float64, ok bool) {
	n := len(terms)
	var a [3][4]float64
	for r, i := range terms {
		for c, j := range terms {
			a[r][c] = xx[i][j]
		}
		a[r][n] = xc[i]
	}
	for col := 0; col < n; col++ {
		piv := col
		for r := col + 1; r < n; r++ {
			if math.Abs(a[r][col]) > math.Abs(a[piv][col]) {
				piv = r
			}
		}
		if math.Abs(a[piv][col]) < 1e-300 {
			return th, false
		}
		a[col], a[piv] = a[piv], a[col]
		for r := 0; r < n; r++ {
			if r == col {
				continue
			}
			f := a[r][col] / a[col][col]
			for c := col; c <= n; c++ {
				a[r][c] -= f * a[col][c]
			}
		}
	}
	for r, i := range terms {
		v := a[r][n] / a[r][r]
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return th, false
		}
		th[i] = v
	}
	return th, true
}
