package ort

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/model"
)

// Precision is the arithmetic of the encoder's linear layers
// ([Provider.Precision]).
type Precision string

// The precisions. The zero value is [PrecisionFP32].
const (
	// PrecisionFP32 runs the graph's float32 arithmetic.
	PrecisionFP32 Precision = "fp32"
	// PrecisionInt8 rewrites the encoder's linear layers at load into
	// int8 (model.RewriteInt8: weights per output channel, activations
	// per token row, so a text's vector never depends on its batch),
	// kept only if a canary run against float32 holds every fidelity
	// gate ([Fidelity.Check]); else the sessions run float32 with a
	// warning. CPU only: CUDA and TensorRT run float32 with a warning.
	PrecisionInt8 Precision = "int8"
)

// ParsePrecision reads a --precision value: fp32 or int8.
func ParsePrecision(s string) (Precision, error) {
	switch p := Precision(strings.ToLower(strings.TrimSpace(s))); p {
	case "", PrecisionFP32:
		return PrecisionFP32, nil
	case PrecisionInt8:
		return p, nil
	}
	return "", fmt.Errorf("precision %q (want fp32 or int8)", s)
}

func (p Precision) orFP32() Precision {
	if p == "" {
		return PrecisionFP32
	}
	return p
}

// PrecisionPlan is how the sessions of one model on one provider do their
// arithmetic, decided once per process with the [AttentionPlan] it is
// part of.
type PrecisionPlan struct {
	// Requested is the --precision value the plan answers; Int8 is true
	// when sessions run an int8 graph (the rewrite, or a graph quantized
	// as exported when AsExported).
	Requested  Precision
	Int8       bool
	AsExported bool
	// Linears and Quantized count the encoder linear layers and those in
	// int8; WeightBytes are their weights' bytes as the sessions hold
	// them (int8 values and scales) and FP32Bytes as float32.
	Linears, Quantized     int
	WeightBytes, FP32Bytes int64
	// Fidelity is what the canary measured against float32.
	Fidelity Fidelity
	// Note says what was decided and why; Warn marks one the operator
	// should act on (int8 asked for and refused).
	Note string
	Warn bool
}

// String is the plan's start-up log line.
func (p PrecisionPlan) String() string {
	form := PrecisionFP32
	if p.Int8 {
		form = PrecisionInt8
	}
	return fmt.Sprintf("precision %s (--precision %s): %s", form, p.Requested.orFP32(), p.Note)
}

// The fidelity gates int8 must hold against float32, text by text over a
// corpus (the canary's texts at load; the mixed multilingual corpus in the
// tests): the dense vectors' cosine, the overlap of the sparse vectors'
// ten heaviest ids, and the ColBERT vectors' cosine token by token.
const (
	GateDenseMin    = 0.99
	GateDenseMean   = 0.995
	GateSparseMean  = 0.9
	GateColBERTMean = 0.99
	// sparseTop is how many of a sparse vector's heaviest ids the gate
	// compares.
	sparseTop = 10
)

// Fidelity is how close one set of vectors is to another, text by text.
type Fidelity struct {
	Texts int
	// DenseMin and DenseMean are the dense vectors' cosines.
	DenseMin, DenseMean float64
	// SparseMin and SparseMean are the shares of the reference's ten
	// heaviest ids (fewer when it has fewer) among the other's, per text.
	SparseMin, SparseMean float64
	// ColBERTMin and ColBERTMean are the cosines of the ColBERT vectors
	// over every real token of every text.
	ColBERTMin, ColBERTMean float64

	denseSum, sparseSum, colbertSum float64
	sparseN, colbertN               int
}

// Check returns nil when every gate holds, else an error naming the first
// that does not.
func (f Fidelity) Check() error {
	switch {
	case f.Texts == 0:
		return fmt.Errorf("no texts compared")
	case !(f.DenseMin >= GateDenseMin):
		return fmt.Errorf("dense cosine min %.4f < %g", f.DenseMin, GateDenseMin)
	case !(f.DenseMean >= GateDenseMean):
		return fmt.Errorf("dense cosine mean %.4f < %g", f.DenseMean, GateDenseMean)
	case f.sparseN > 0 && !(f.SparseMean >= GateSparseMean):
		return fmt.Errorf("sparse top-%d overlap mean %.3f < %g", sparseTop, f.SparseMean, GateSparseMean)
	case f.colbertN > 0 && !(f.ColBERTMean >= GateColBERTMean):
		return fmt.Errorf("colbert token cosine mean %.4f < %g", f.ColBERTMean, GateColBERTMean)
	}
	return nil
}

// String is the figures on one line.
func (f Fidelity) String() string {
	return fmt.Sprintf("%d texts: dense cosine min %.4f mean %.4f; sparse top-%d overlap min %.2f mean %.3f; colbert token cosine min %.4f mean %.4f",
		f.Texts, f.DenseMin, f.DenseMean, sparseTop, f.SparseMin, f.SparseMean, f.ColBERTMin, f.ColBERTMean)
}

// Dense adds one text's dense vectors (normalized or not).
func (f *Fidelity) Dense(ref, got []float32) {
	c := cosine(ref, got)
	if f.Texts == 0 || c < f.DenseMin || math.IsNaN(c) {
		f.DenseMin = c
	}
	f.Texts++
	f.denseSum += c
	f.DenseMean = f.denseSum / float64(f.Texts)
}

// Sparse adds one text's sparse vectors as id -> weight; ids of weight
// <= 0 do not count.
func (f *Fidelity) Sparse(ref, got map[int32]float32) {
	want := topIDs(ref, sparseTop)
	if len(want) == 0 {
		return
	}
	have := topIDs(got, len(want))
	hit := 0
	for _, id := range want {
		if slices.Contains(have, id) {
			hit++
		}
	}
	o := float64(hit) / float64(len(want))
	if f.sparseN == 0 || o < f.SparseMin {
		f.SparseMin = o
	}
	f.sparseN++
	f.sparseSum += o
	f.SparseMean = f.sparseSum / float64(f.sparseN)
}

// ColBERT adds one token's ColBERT vectors.
func (f *Fidelity) ColBERT(ref, got []float32) {
	c := cosine(ref, got)
	if f.colbertN == 0 || c < f.ColBERTMin || math.IsNaN(c) {
		f.ColBERTMin = c
	}
	f.colbertN++
	f.colbertSum += c
	f.ColBERTMean = f.colbertSum / float64(f.colbertN)
}

// topIDs are the k heaviest ids of weight > 0, ties by id.
func topIDs(w map[int32]float32, k int) []int32 {
	ids := make([]int32, 0, len(w))
	for id, v := range w {
		if v > 0 {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b int32) int {
		if c := cmp.Compare(w[b], w[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return ids[:min(k, len(ids))]
}

// cosine is a's cosine to b; two zero vectors are alike (1), one zero
// vector is not (0); a length mismatch is NaN.
func cosine(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.NaN()
	}
	var ab, aa, bb float64
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		ab += x * y
		aa += x * x
		bb += y * y
	}
	switch {
	case aa == 0 && bb == 0:
		return 1
	case aa == 0 || bb == 0:
		return 0
	}
	return ab / math.Sqrt(aa*bb)
}

// CompareRuns adds to f the texts of one chunk in, run by a reference
// session (ref) and another (got): dense, sparse (ids of m's special
// tokens and unk, 3, left out as FlagEmbedding does) and ColBERT vectors
// computed as the engine computes them, the heads of a hidden-state
// export applied here.
func CompareRuns(f *Fidelity, m *model.Model, in engine.RunInput, ref, got engine.RunOutput) {
	special := []int32{int32(m.Config.BOSID), int32(m.Config.EOSID), int32(m.Config.PadID), 3}
	for r := range in.Batch {
		n := 0
		for i := range in.Seq {
			if in.Mask[r*in.Seq+i] != 0 {
				n = i + 1
			}
		}
		if n == 0 {
			continue
		}
		f.Dense(denseRow(ref, r, in.Seq), denseRow(got, r, in.Seq))
		rs, gs := map[int32]float32{}, map[int32]float32{}
		for i := range n {
			id := int32(in.IDs[r*in.Seq+i])
			if slices.Contains(special, id) {
				continue
			}
			rs[id] = max(rs[id], sparseAt(m, ref, r, i, in.Seq))
			gs[id] = max(gs[id], sparseAt(m, got, r, i, in.Seq))
		}
		f.Sparse(rs, gs)
		for i := 1; i < n; i++ {
			f.ColBERT(colbertAt(m, ref, r, i, in.Seq), colbertAt(m, got, r, i, in.Seq))
		}
	}
}

func hiddenAt(o engine.RunOutput, r, i, seq int) []float32 {
	k := r*seq + i
	return o.Hidden[k*o.Dim : (k+1)*o.Dim]
}

func denseRow(o engine.RunOutput, r, seq int) []float32 {
	if o.Hidden != nil {
		return hiddenAt(o, r, 0, seq)
	}
	return o.Dense[r*o.Dim : (r+1)*o.Dim]
}

func sparseAt(m *model.Model, o engine.RunOutput, r, i, seq int) float32 {
	if o.Hidden == nil {
		return o.Sparse[r*seq+i]
	}
	h := hiddenAt(o, r, i, seq)
	s := m.Sparse.B
	for j, w := range m.Sparse.W {
		s += w * h[j]
	}
	return max(s, 0)
}

// colbertAt is token i's ColBERT vector (i >= 1), not normalized for a
// hidden-state export (the cosine does not mind).
func colbertAt(m *model.Model, o engine.RunOutput, r, i, seq int) []float32 {
	if o.Hidden == nil {
		k := r*o.ColBERTLen + i - 1
		return o.ColBERT[k*o.ColBERTDim : (k+1)*o.ColBERTDim]
	}
	h := hiddenAt(o, r, i, seq)
	c := m.ColBERT
	v := make([]float32, c.Dim)
	for d := range c.Dim {
		s := c.B[d]
		for j, w := range c.W[d*len(h) : (d+1)*len(h)] {
			s += w * h[j]
		}
		v[d] = s
	}
	return v
}
