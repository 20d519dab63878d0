package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/tokenizer"
)

// Rate is one throughput measurement over a set of texts.
type Rate struct {
	Texts   int
	Elapsed time.Duration
	// Tokens are the real tokens run and Padded the tokens run including
	// padding, when the contender reports them.
	Tokens, Padded int
	// CPU is the process's CPU time (user and system) over Elapsed, when
	// the measure records it: every goroutine's, the NATS server's too
	// when it runs in the process.
	CPU time.Duration
}

// CPUPerText is CPU a text, in microseconds.
func (r Rate) CPUPerText() float64 {
	if r.Texts == 0 {
		return 0
	}
	return float64(r.CPU.Nanoseconds()) / 1e3 / float64(r.Texts)
}

// Cores is CPU over Elapsed: how many cores the run kept busy.
func (r Rate) Cores() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return r.CPU.Seconds() / r.Elapsed.Seconds()
}

// PerSecond is texts per second.
func (r Rate) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Texts) / r.Elapsed.Seconds()
}

// Fill is the share of the tokens run that were real, not padding.
func (r Rate) Fill() float64 {
	if r.Padded == 0 {
		return 0
	}
	return float64(r.Tokens) / float64(r.Padded)
}

// engineCallTexts is how many texts one bare-engine call holds when the
// texts are not cut into the consumer's batches (the warm pass and the
// peer's texts).
const engineCallTexts = 256

// fixedCalls cuts texts into calls of n texts.
func fixedCalls(texts []string, n int) [][]string {
	var calls [][]string
	for len(texts) > 0 {
		k := min(n, len(texts))
		calls = append(calls, texts[:k])
		texts = texts[k:]
	}
	return calls
}

// bareEngine embeds the texts of calls directly with e, one Embed per call,
// from callers goroutines at once (the consumer makes one call per job and
// runs every job it holds at once; the embed command keeps two batches in
// flight), and fails if any item fails.
func bareEngine(ctx context.Context, e *engine.Engine, calls [][]string, callers int) (Rate, error) {
	in := make([][]engine.Text, len(calls))
	texts := 0
	for i, call := range calls {
		in[i] = make([]engine.Text, len(call))
		for k, t := range call {
			in[i][k] = engine.Text{Text: t, Outputs: engine.Dense, Truncate: true}
		}
		texts += len(call)
	}
	var (
		next           atomic.Int64
		mu             sync.Mutex
		tokens, padTok int
		firstErr       error
		wg             sync.WaitGroup
	)
	start, cpu := time.Now(), cpuTime()
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c := int(next.Add(1)) - 1
				if c >= len(in) {
					return
				}
				embs, rep, err := e.Embed(ctx, in[c], engine.Call{})
				if err == nil {
					for i := range embs {
						if embs[i].Err != nil {
							err = fmt.Errorf("call %d text %d: %w", c, i, embs[i].Err)
							break
						}
					}
				}
				mu.Lock()
				tokens += rep.Tokens
				padTok += rep.PaddedTokens
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return Rate{Texts: texts, Elapsed: time.Since(start), Tokens: tokens, Padded: padTok, CPU: cpuTime() - cpu}, firstErr
}

// arrivalBatch is the batch size of arrival-order batching.
const arrivalBatch = 32

// arrivalOrder embeds texts the way a batcher without packing does: fixed
// batches of arrivalBatch texts in arrival order, each padded to its own
// longest text, one goroutine per session. Tokenizing is inside the timing,
// as it is inside the engine's.
func arrivalOrder(ctx context.Context, s *stack, pool *runnerPool, texts []string) (Rate, error) {
	var (
		next           atomic.Int64
		mu             sync.Mutex
		tokens, padTok int
		firstErr       error
		wg             sync.WaitGroup
	)
	start := time.Now()
	for range len(pool.all) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := <-pool.free
			defer func() { pool.free <- r }()
			for {
				lo := int(next.Add(arrivalBatch)) - arrivalBatch
				if lo >= len(texts) {
					return
				}
				batch := texts[lo:min(lo+arrivalBatch, len(texts))]
				ids := make([][]int32, len(batch))
				real := 0
				for i, t := range batch {
					ids[i] = s.tok.Encode(t, tokenizer.Options{AddSpecialTokens: true, MaxTokens: s.m.Config.MaxTokens}).IDs
					real += len(ids[i])
				}
				in := padded(ids, int64(s.m.Config.PadID))
				out, err := r.Run(ctx, in)
				if err == nil {
					for b := range in.Batch {
						_ = clsDense(out, b, in.Seq)
					}
				}
				mu.Lock()
				tokens += real
				padTok += in.Batch * in.Seq
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return Rate{Texts: len(texts), Elapsed: time.Since(start), Tokens: tokens, Padded: padTok}, firstErr
}
