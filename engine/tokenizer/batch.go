package tokenizer

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// batchChunk is how many texts a worker claims at a time: large enough to
// amortize the atomic counter, small enough to balance uneven texts.
const batchChunk = 16

// EncodeBatch encodes texts in parallel over GOMAXPROCS workers; the
// result has one Encoding per text, in order.
func (t *Tokenizer) EncodeBatch(texts []string, opt Options) []Encoding {
	out := make([]Encoding, len(texts))
	workers := min(runtime.GOMAXPROCS(0), (len(texts)+batchChunk-1)/batchChunk)
	if workers <= 1 {
		for i, s := range texts {
			out[i] = t.Encode(s, opt)
		}
		return out
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				lo := int(next.Add(batchChunk)) - batchChunk
				if lo >= len(texts) {
					return
				}
				for i := lo; i < min(lo+batchChunk, len(texts)); i++ {
					out[i] = t.Encode(texts[i], opt)
				}
			}
		})
	}
	wg.Wait()
	return out
}
