package engine

import (
	"fmt"

	"github.com/jetembed/jetembed/engine/internal/heads"
)

// input lays out a pulled chunk: one row per text, right-padded with the
// pad id to the chunk's sequence length.
func (e *Engine) input(w *work) RunInput {
	seq := w.seq
	in := RunInput{Batch: len(w.rows), Seq: seq, IDs: make([]int64, len(w.rows)*seq), Mask: make([]int64, len(w.rows)*seq)}
	pad := int64(e.model.Config.PadID)
	for r, en := range w.rows {
		row := in.IDs[r*seq : (r+1)*seq]
		mask := in.Mask[r*seq : (r+1)*seq]
		ids := en.c.toks[en.item].ids
		for j := range row {
			if j < len(ids) {
				row[j], mask[j] = int64(ids[j]), 1
			} else {
				row[j] = pad
			}
		}
	}
	return in
}

// collect applies the heads to the rows of a batch x seq chunk's output
// that hold a call's items (items[k] is row rows[k]) and fills them. A
// hidden-state output goes through the Go heads; a three-head output is
// filtered and copied. Padding positions are never read.
func (e *Engine) collect(items, rows []int, batch, seq int, o RunOutput, texts []Text, toks []tokenized, out []Embedding) error {
	if err := e.checkOutput(o, batch, seq); err != nil {
		return err
	}
	sp := heads.Sparser{Special: e.special}
	var tw []float32
	for k, it := range items {
		r := rows[k]
		ids := toks[it].ids
		n := len(ids)
		want := texts[it].Outputs
		if want == 0 {
			want = Dense // the wire default
		}
		emb := &out[it]
		if o.Hidden != nil {
			d := o.Dim
			h := o.Hidden[r*seq*d : (r*seq+n)*d]
			if want.Has(Dense) {
				emb.Dense = heads.Dense(make([]float32, 0, d), h[:d])
			}
			if want.Has(Sparse) {
				tw = e.weights.TokenWeights(tw[:0], h)
				emb.SparseIDs, emb.SparseWeights = sp.Sparse(nil, nil, ids, tw)
			}
			if want.Has(ColBERT) {
				c := e.weights.ColBERTDim
				emb.ColBERT = e.weights.ColBERT(make([]float32, 0, (n-1)*c), h[d:])
				emb.ColBERTDim = c
			}
			continue
		}
		if want.Has(Dense) {
			emb.Dense = heads.Dense(make([]float32, 0, o.Dim), o.Dense[r*o.Dim:(r+1)*o.Dim])
		}
		if want.Has(Sparse) {
			emb.SparseIDs, emb.SparseWeights = sp.Sparse(nil, nil, ids, o.Sparse[r*seq:r*seq+n])
		}
		if want.Has(ColBERT) {
			c := o.ColBERTDim
			rows := o.ColBERT[r*o.ColBERTLen*c : (r*o.ColBERTLen+n-1)*c]
			emb.ColBERT = heads.ColBERTRows(make([]float32, 0, (n-1)*c), rows, c)
			emb.ColBERTDim = c
		}
	}
	return nil
}

// checkOutput refuses an output whose sizes do not match the chunk, so a
// misbehaving runner gives an error, not a panic or garbage vectors.
func (e *Engine) checkOutput(o RunOutput, batch, seq int) error {
	if o.Hidden != nil {
		switch {
		case e.weights == nil:
			return fmt.Errorf("engine: runner returned hidden states but the model has no head weights")
		case o.Dim != e.weights.Dim || len(o.Hidden) != batch*seq*o.Dim:
			return fmt.Errorf("engine: hidden output has %d values, dim %d; want %dx%dx%d", len(o.Hidden), o.Dim, batch, seq, e.weights.Dim)
		}
		return nil
	}
	switch {
	case o.Dim <= 0 || len(o.Dense) != batch*o.Dim:
		return fmt.Errorf("engine: dense output has %d values, dim %d, for batch %d", len(o.Dense), o.Dim, batch)
	case len(o.Sparse) != batch*seq:
		return fmt.Errorf("engine: sparse output has %d values, want %dx%d", len(o.Sparse), batch, seq)
	case o.ColBERTLen < seq-1 || o.ColBERTDim <= 0 || len(o.ColBERT) != batch*o.ColBERTLen*o.ColBERTDim:
		return fmt.Errorf("engine: colbert output has %d values, %d rows of %d, for %dx%d", len(o.ColBERT), o.ColBERTLen, o.ColBERTDim, batch, seq)
	}
	return nil
}
