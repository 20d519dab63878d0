package heads

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Weights are the linear heads of a hidden-state export:
// sparse_linear (Dim -> 1) and colbert_linear (Dim -> ColBERTDim).
type Weights struct {
	Dim        int
	SparseW    []float32 // Dim
	SparseBias float32
	ColBERTDim int
	ColBERTW   []float32 // ColBERTDim x Dim, row-major (torch Linear layout)
	ColBERTB   []float32 // ColBERTDim

	// Workers is how many goroutines [Weights.ColBERT] splits its output
	// columns over. Zero or one (the default) keeps it on the calling
	// goroutine: on CPU hosts the ONNX Runtime sessions already use every
	// core, and a head that fans out would only compete with them. GPU
	// hosts, whose CPU is mostly idle, may set it to the number of spare
	// cores; each call then starts Workers-1 goroutines (a few small
	// allocations). Results are the same, bit for bit, either way.
	Workers int
}

// ErrShape reports head weights whose sizes do not agree.
var ErrShape = errors.New("heads: weight shapes disagree")

// Validate checks the sizes of w against each other.
func (w *Weights) Validate() error {
	switch {
	case w.Dim <= 0 || len(w.SparseW) != w.Dim:
		return fmt.Errorf("%w: sparse weight has %d values, hidden size %d", ErrShape, len(w.SparseW), w.Dim)
	case w.ColBERTDim <= 0 || len(w.ColBERTW) != w.ColBERTDim*w.Dim:
		return fmt.Errorf("%w: colbert weight has %d values, want %d x %d", ErrShape, len(w.ColBERTW), w.ColBERTDim, w.Dim)
	case len(w.ColBERTB) != w.ColBERTDim:
		return fmt.Errorf("%w: colbert bias has %d values, want %d", ErrShape, len(w.ColBERTB), w.ColBERTDim)
	}
	return nil
}

// Special is the set of token ids sparse vectors leave out (cls/bos, eos,
// pad, unk for XLM-R: 0, 2, 1, 3). It is tiny, so a slice beats a map.
type Special []int32

// Has reports whether id is special.
func (s Special) Has(id int32) bool { return slices.Contains(s, id) }

// Normalize scales v to unit L2 norm in place; a zero vector stays zero
// (torch.nn.functional.normalize's eps behaviour).
//
// The sum of squares is accumulated in float32 over four lanes: for vectors
// of a few thousand values its relative error stays near 1e-7, far below
// the 1e-5 the outputs are held to, and it runs several times faster than
// float64 on the ColBERT rows (one per token).
func Normalize(v []float32) {
	n := math.Sqrt(float64(dot(v, v)))
	if n < 1e-12 {
		return
	}
	inv := float32(1 / n)
	for i := range v {
		v[i] *= inv
	}
}

// Dense appends the normalized CLS state (or dense_vecs row) to dst.
func Dense(dst, cls []float32) []float32 {
	start := len(dst)
	dst = append(dst, cls...)
	Normalize(dst[start:])
	return dst
}

// TokenWeights appends relu(sparse_linear(h_t)) for each of the rows of
// hidden (rows x w.Dim) to dst.
func (w *Weights) TokenWeights(dst, hidden []float32) []float32 {
	for row := 0; row+w.Dim <= len(hidden); row += w.Dim {
		v := dot(w.SparseW, hidden[row:row+w.Dim]) + w.SparseBias
		dst = append(dst, max(v, 0))
	}
	return dst
}

// ColBERTRows appends rows (rows x dim, e.g. colbert_vecs of a three-head
// export) to dst, each L2-normalized. Exports normalize already; doing it
// again is idempotent and protects against exports that do not.
func ColBERTRows(dst, rows []float32, dim int) []float32 {
	for r := 0; r+dim <= len(rows); r += dim {
		start := len(dst)
		dst = append(dst, rows[r:r+dim]...)
		Normalize(dst[start:])
	}
	return dst
}

// dot is the inner product, accumulated in float32 four lanes wide so the
// compiler keeps it in registers; ORT's own GEMM order differs anyway.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}
