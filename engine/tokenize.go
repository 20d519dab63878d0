package engine

import (
	"context"
	"runtime"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jetembed/jetembed/schema"
)

// Tokenizer is what the engine needs from a tokenizer: one text to token
// ids with special tokens, cut to maxTokens, plus the count before the cut.
// It must be safe for concurrent use. Both backends of engine/tokenizer
// (pure Go, and the HuggingFace library under -tags hftokenizers) have
// this signature as EncodeIDs: pass TokenizerFunc(t.EncodeIDs).
type Tokenizer interface {
	Encode(text string, maxTokens int) (ids []int32, count int)
}

// TokenizerFunc adapts a function to [Tokenizer].
type TokenizerFunc func(text string, maxTokens int) ([]int32, int)

// Encode implements [Tokenizer].
func (f TokenizerFunc) Encode(text string, maxTokens int) ([]int32, int) { return f(text, maxTokens) }

// tokenized is one text after tokenization.
type tokenized struct {
	ids []int32
	err *schema.Error
}

// tokenize encodes every text once, in parallel over the CPUs for large
// calls, and fills the per-item errors and token counts of out.
// The time it takes goes to the engine's Metrics.
func (e *Engine) tokenize(ctx context.Context, texts []Text, out []Embedding) []tokenized {
	if m := e.pool.recorder(); m != nil {
		defer func(start time.Time) { m.Tokenize(ctx, time.Since(start)) }(time.Now())
	}
	toks := make([]tokenized, len(texts))
	one := func(i int) {
		t := texts[i]
		if !utf8.ValidString(t.Text) {
			toks[i].err = schema.Errorf(schema.CodeInvalidUTF8, "text %d is not valid UTF-8", i)
			return
		}
		ids, count := e.tok.Encode(t.Text, e.cfg.MaxTokens)
		out[i].Tokens = count
		if count > e.cfg.MaxTokens {
			if !t.Truncate {
				toks[i].err = schema.Errorf(schema.CodeTextTooLong, "text %d has %d tokens, the model takes %d", i, count, e.cfg.MaxTokens)
				return
			}
			out[i].Truncated = true
		}
		toks[i].ids = ids
	}
	workers := min(runtime.GOMAXPROCS(0), len(texts)/16)
	if workers <= 1 {
		for i := range texts {
			one(i)
		}
		return toks
	}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			for i := w; i < len(texts); i += workers {
				one(i)
			}
		})
	}
	wg.Wait()
	return toks
}
