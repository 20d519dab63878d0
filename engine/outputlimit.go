package engine

import (
	"context"

	"github.com/jetembed/jetembed/schema"
)

type outputLimitKey struct{}

// WithOutputLimit returns a context whose [Engine.Embed] calls are refused
// with result_too_large when the vectors they would return take more than
// limit bytes: the estimate ([Engine.OutputBytes]) is made from the token
// counts right after tokenizing, before the call takes any admission
// budget or runs a session, so a small job that asks for a huge result
// (ColBERT is 4 KiB a token on BGE-M3) costs no compute. A limit of 0 or
// less means none.
func WithOutputLimit(ctx context.Context, limit int64) context.Context {
	return context.WithValue(ctx, outputLimitKey{}, limit)
}

func outputLimit(ctx context.Context) int64 {
	v, _ := ctx.Value(outputLimitKey{}).(int64)
	return v
}

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

// checkOutputLimit refuses a call whose vectors would exceed the context's
// output limit; toks are the call's tokenized texts (the failed ones
// skipped).
func (e *Engine) checkOutputLimit(ctx context.Context, texts []Text, toks []tokenized) *schema.Error {
	limit := outputLimit(ctx)
	if limit <= 0 {
		return nil
	}
	var n int64
	for i, t := range toks {
		if t.err == nil {
			n += e.OutputBytes(len(t.ids), texts[i].Outputs)
		}
	}
	if n <= limit {
		return nil
	}
	return schema.Errorf(schema.CodeResultTooLarge, "the job's vectors would take at least %d bytes, over the result limit of %d bytes", n, limit)
}
