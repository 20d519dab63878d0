// Package fakes holds the test doubles for engine's two seams that the
// tests of several packages share: a [Runner] around a session (gated or
// failing runs, counted) and an [Embedder] around an engine (slow calls,
// each one recorded). Both wrap a real part and
// change only when its work finishes or whether it fails, so a test
// decides the order of events instead of guessing it with a sleep.
//
// Only tests import it. It imports engine and nothing else of the
// project; engine's own internal tests cannot use it (a cycle) and keep
// their fakes.
package fakes

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetembed/jetembed/engine"
)

// Runner is an [engine.Runner] whose runs wait and fail as the test says.
// Each run is counted, then Fail (nil: never) may fail it, then a run of
// MinSeq tokens or more waits for a value from Gate (nil: no wait) until
// Open is closed or its context ends, then it runs.
type Runner struct {
	engine.Runner
	// Fail returns the error the run fails with, or nil to run it.
	Fail func(engine.RunInput) error
	// Gate lets one gated run through per value; Open, closed, lets every
	// run through from then on.
	Gate   <-chan struct{}
	Open   <-chan struct{}
	MinSeq int
	// Runs, when set, counts the runs begun (one count can serve all the
	// sessions of an engine).
	Runs *atomic.Int64
}

func (r *Runner) Run(ctx context.Context, in engine.RunInput) (engine.RunOutput, error) {
	if r.Runs != nil {
		r.Runs.Add(1)
	}
	if r.Fail != nil {
		if err := r.Fail(in); err != nil {
			return engine.RunOutput{}, err
		}
	}
	if r.Gate != nil && in.Seq >= r.MinSeq {
		select {
		case <-r.Gate:
		case <-r.Open:
		case <-ctx.Done():
			return engine.RunOutput{}, ctx.Err()
		}
	}
	return r.Runner.Run(ctx, in)
}

// Embedder is an [engine.Embedder] whose calls are slow as the test says
// and are recorded: the first call waits Hold (a wait that does not end
// with its context: a call stuck in the engine), then every call runs and,
// admitted, waits Delay or its context's end (a slow engine: the wait holds
// the engine's budget as a long session run would), and its report is kept.
type Embedder struct {
	engine.Embedder
	Hold, Delay time.Duration

	once    sync.Once
	mu      sync.Mutex
	reports []engine.CallReport
}

func (e *Embedder) Embed(ctx context.Context, texts []engine.Text, call engine.Call) ([]engine.Embedding, engine.CallReport, error) {
	if len(texts) == 0 && call.Hold > 0 {
		return e.Embedder.Embed(ctx, texts, call) // holds budget, runs nothing: not a call to count
	}
	if e.Hold > 0 {
		e.once.Do(func() { time.Sleep(e.Hold) })
	}
	embs, rep, err := e.Embedder.Embed(ctx, texts, call)
	if e.Delay > 0 && err == nil {
		select {
		case <-time.After(e.Delay):
		case <-ctx.Done():
			embs, err = nil, ctx.Err()
		}
	}
	e.mu.Lock()
	e.reports = append(e.reports, rep)
	e.mu.Unlock()
	return embs, rep, err
}

// Calls is the number of Embed calls that returned.
func (e *Embedder) Calls() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.reports)
}

// Reports are the reports of each call, in the order the calls returned.
func (e *Embedder) Reports() []engine.CallReport {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]engine.CallReport(nil), e.reports...)
}
