package engine

import "github.com/jetembed/jetembed/schema"

// OutputsOf is the engine's set for the wire's output names; none means
// dense, the wire's default. Names schema does not know are ignored
// (schema's validation refuses them first).
func OutputsOf(outs []schema.Output) Output {
	if len(outs) == 0 {
		return Dense
	}
	var o Output
	for _, x := range outs {
		switch x {
		case schema.OutputDense:
			o |= Dense
		case schema.OutputSparse:
			o |= Sparse
		case schema.OutputColBERT:
			o |= ColBERT
		}
	}
	return o
}

// Item is e in its wire form with the outputs of want. The vectors share
// e's memory. A sparse vector asked for is present even when empty (every
// token may have been dropped), with empty lists rather than nil ones.
func (e *Embedding) Item(want Output) schema.Item {
	it := schema.Item{Tokens: e.Tokens, Truncated: e.Truncated, Error: e.Err}
	if e.Err != nil {
		return it
	}
	if want.Has(Dense) {
		it.Dense = e.Dense
	}
	if want.Has(Sparse) {
		it.Sparse = &schema.Sparse{IDs: nonNil(e.SparseIDs), Weights: nonNil(e.SparseWeights)}
	}
	if want.Has(ColBERT) {
		it.ColBERT = colbertRows(e.ColBERT, e.ColBERTDim)
	}
	return it
}

// colbertRows slices a row-major token x dim matrix into per-token vectors
// sharing its memory.
func colbertRows(m []float32, dim int) []schema.Vector {
	if dim <= 0 || len(m) == 0 {
		return nil
	}
	rows := make([]schema.Vector, len(m)/dim)
	for r := range rows {
		rows[r] = m[r*dim : (r+1)*dim : (r+1)*dim]
	}
	return rows
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
