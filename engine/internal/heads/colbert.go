package heads

import (
	"slices"
	"sync"
)

// Tile sizes of the ColBERT GEMM. A tile of tileCols weight rows (64 KB at
// Dim 1024) stays in cache while the tileRows tokens of a row tile (256 KB)
// pass over it. They also keep every gonum call below its parallel
// threshold (4 blocks of 64x64), so gonum never starts goroutines or
// allocates: parallelism is ours to choose (see [Weights.Workers]).
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
// unless Workers > 1. The result does not depend on Workers, bit for bit.
func (w *Weights) ColBERT(dst, hidden []float32) []float32 {
	d, c := w.Dim, w.ColBERTDim
	rows := len(hidden) / d
	start := len(dst)
	dst = slices.Grow(dst, rows*c)[:start+rows*c]
	out := dst[start:]
	colTiles := (c + tileCols - 1) / tileCols
	if workers := min(max(w.Workers, 1), colTiles); workers > 1 && rows > 0 {
		w.colbertParallel(out, hidden, workers)
		return dst
	}
	for r0 := 0; r0 < rows; r0 += tileRows {
		m := min(tileRows, rows-r0)
		w.colbertBlock(out, hidden, r0, m, 0, c)
		// Normalized while the tile's rows are still in cache.
		for r := r0; r < r0+m; r++ {
			Normalize(out[r*c : (r+1)*c])
		}
	}
	return dst
}

// colbertParallel gives each of workers goroutines (the caller's among
// them) a run of whole column tiles, so each reads only its share of the
// weights, and a text of a few tokens is split as well as a long one.
// Whole tiles make every gemmNT call the one the serial path makes, which
// keeps the result bit-identical to it.
func (w *Weights) colbertParallel(out, hidden []float32, workers int) {
	d, c := w.Dim, w.ColBERTDim
	rows := len(hidden) / d
	colTiles := (c + tileCols - 1) / tileCols
	var wg sync.WaitGroup
	for k := range workers {
		j0 := k * colTiles / workers * tileCols
		j1 := min((k+1)*colTiles/workers*tileCols, c)
		part := func() {
			for r0 := 0; r0 < rows; r0 += tileRows {
				w.colbertBlock(out, hidden, r0, min(tileRows, rows-r0), j0, j1)
			}
		}
		if k == workers-1 {
			part()
		} else {
			wg.Go(part)
		}
	}
	wg.Wait()
	for r := range rows {
		Normalize(out[r*c : (r+1)*c])
	}
}

// colbertBlock computes columns j0..j1 (a multiple of tileCols, and one
// past the last) of output rows r0..r0+m: the bias, plus the GEMM one
// tile of tileCols columns at a time.
func (w *Weights) colbertBlock(out, hidden []float32, r0, m, j0, j1 int) {
	d, c := w.Dim, w.ColBERTDim
	a := hidden[r0*d : (r0+m)*d]
	o := out[r0*c : (r0+m)*c]
	for r := range m {
		copy(o[r*c+j0:r*c+j1], w.ColBERTB[j0:j1])
	}
	for j := j0; j < j1; j += tileCols {
		n := min(tileCols, j1-j)
		gemmNT(m, n, d, a, w.ColBERTW[j*d:(j+n)*d], o[j:], c)
	}
}
