//go:build cgo

package consumer

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/ort/enginetest"
	"github.com/jetembed/jetembed/schema"
)

func engineRuns(e *engine.Engine) (n int64) {
	for _, s := range e.Stats().Sessions {
		n += s.Runs
	}
	return n
}

// TestCacheRealEngine: through the tiny model on ONNX Runtime, a job run
// again under a new id is answered from the cache with no session run, and
// its items are byte for byte the computed ones, in both encodings and
// with every output (a cut text too).
func TestCacheRealEngine(t *testing.T) {
	e := enginetest.Open(t, engine.Config{Sessions: 1, MaxTokens: 24})
	r := newRigWith(t, Config{Cache: newMemCache()}, e, nil)
	texts := []string{"the quick brown fox", "jumps over the lazy dog", "the quick brown fox", "long text " + string(bytes.Repeat([]byte("word "), 40))}
	all := []schema.Output{schema.OutputDense, schema.OutputSparse, schema.OutputColBERT}
	for _, enc := range []schema.Encoding{schema.EncodingMsgpack, schema.EncodingJSON} {
		first := schema.NewJob(fmt.Sprint("first-", enc), texts...)
		first.Outputs, first.Reply = all, "r.x"
		if enc == schema.EncodingJSON {
			first.Outputs = []schema.Output{schema.OutputSparse} // another key: computed again
		}
		r.submit(t, first, enc)
		runs := engineRuns(e)
		again := schema.NewJob(fmt.Sprint("again-", enc), texts...)
		again.Outputs, again.Reply = first.Outputs, "r.x"
		r.submit(t, again, enc)
		if n := engineRuns(e) - runs; n != 0 {
			t.Errorf("%v: the re-run ran %d chunks, want 0", enc, n)
		}
		res1, _ := r.resultFor(t, first.ID)
		res2, _ := r.resultFor(t, again.ID)
		if !bytes.Equal(itemBytes(t, res1, enc), itemBytes(t, res2, enc)) {
			t.Errorf("%v: cached items differ from the computed ones", enc)
		}
		if !res2.Items[3].Truncated || res2.Usage.Cached != 4 || res2.Usage.Tokens != res1.Usage.Tokens {
			t.Errorf("%v: usage %+v after %+v, truncated %v", enc, res2.Usage, res1.Usage, res2.Items[3].Truncated)
		}
	}
}
