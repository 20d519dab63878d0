package heads

import (
	"slices"
	"sync"
)

// Tile sizes of the ColBERT GEMM. A tile of tileCols weight rows (64 KB at
// Dim 1024) stays in L2 while tileRows tokens pass over it. They also keep
// every gonum call below its parallel threshold (4 blocks of 64x64), so
// gonum never starts goroutines or allocates: parallelism is ours to
// choose (see [Weights.Workers]).
const (
	tileRows = 64
	tileCols = 16
)

// ColBERT appends colbert_linear(h_t), L2-normalized, for each of the rows
// of hidden (rows x w.Dim) to dst. The caller passes only the rows to keep:
// the real tokens after CLS.
//
// It is one GEMM, hidden (rows x Dim) times ColBERTW transposed (Dim x
// ColBERTDim), over all the rows at once rather than a matrix-vector
// product per token: each tile of weights is read once per tile of tokens
// instead of once per token. Once dst has grown it allocates nothing
// unless Workers > 1.
func (w *Weights) ColBERT(dst, hidden []float32) []float32 {
	d, c := w.Dim, w.ColBERTDim
	rows := len(hidden) / d
	start := len(dst)
	dst = slices.Grow(dst, rows*c)[:start+rows*c]
	out := dst[start:]
	tiles := (rows + tileRows - 1) / tileRows
	workers := min(max(w.Workers, 1), tiles)
	if workers <= 1 {
		for t := range tiles {
			w.colbertTile(out, hidden, t)
		}
		return dst
	}
	// Tiles are dealt round-robin: they are equal in cost except the last.
	var wg sync.WaitGroup
	for k := 1; k < workers; k++ {
		wg.Go(func() {
			for t := k; t < tiles; t += workers {
				w.colbertTile(out, hidden, t)
			}
		})
	}
	for t := 0; t < tiles; t += workers {
		w.colbertTile(out, hidden, t)
	}
	wg.Wait()
	return dst
}

// colbertTile computes the output rows of row tile t into out and
// normalizes them while they are still in cache.
func (w *Weights) colbertTile(out, hidden []float32, t int) {
	d, c := w.Dim, w.ColBERTDim
	r0 := t * tileRows
	m := min(tileRows, len(hidden)/d-r0)
	a := hidden[r0*d : (r0+m)*d]
	o := out[r0*c : (r0+m)*c]
	for r := range m {
		copy(o[r*c:(r+1)*c], w.ColBERTB)
	}
	for j := 0; j < c; j += tileCols {
		n := min(tileCols, c-j)
		gemmNT(m, n, d, a, w.ColBERTW[j*d:(j+n)*d], o[j:], c)
	}
	for r := range m {
		Normalize(o[r*c : (r+1)*c])
	}
}
