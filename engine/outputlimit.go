package engine

import "github.com/jetembed/jetembed/schema"

// OutputBytes is the size of the dense and ColBERT vectors of one text of
// tokens tokens (special tokens included, as run: a truncated text counts
// the model's maximum) with outputs o, at 4 bytes a value: what the
// encoded result carries at least (msgpack adds a few bytes of framing,
// JSON two to three times as many). Sparse vectors, at most 8 bytes a
// token and usually far fewer, are not counted.
func (e *Engine) OutputBytes(tokens int, o Output) int64 {
	if o == 0 {
		o = Dense // the wire default
	}
	var n int64
	if o.Has(Dense) {
		n += int64(e.model.Config.HiddenSize) * 4
	}
	if o.Has(ColBERT) && tokens > 1 {
		n += int64(tokens-1) * int64(e.colbertDim()) * 4
	}
	return n
}

// colbertDim is the ColBERT head's width: the hidden-state layout's head
// says it; the three-head export's, known only from a run's output, is
// BGE-M3's, the hidden size.
func (e *Engine) colbertDim() int {
	if e.weights != nil && e.weights.ColBERTDim > 0 {
		return e.weights.ColBERTDim
	}
	return e.model.Config.HiddenSize
}

// checkOutputLimit refuses a call whose vectors would exceed limit bytes
// ([Call.OutputLimit]; 0 or less: none), each text counted as often as
// copies says ([Call.Copies]); toks are the call's tokenized texts (the
// failed ones skipped).
func (e *Engine) checkOutputLimit(limit int64, copies []int, texts []Text, toks []tokenized) *schema.Error {
	if limit <= 0 {
		return nil
	}
	var n int64
	for i, t := range toks {
		if t.err == nil {
			k := int64(1)
			if i < len(copies) && copies[i] > 1 {
				k = int64(copies[i])
			}
			n += k * e.OutputBytes(len(t.ids), texts[i].Outputs)
		}
	}
	if n <= limit {
		return nil
	}
	return schema.Errorf(schema.CodeResultTooLarge, "the job's vectors would take at least %d bytes, over the result limit of %d bytes", n, limit)
}
