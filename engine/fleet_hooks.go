package engine

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"

	"github.com/jetembed/jetembed/engine/internal/pack"
)

// The methods in this file are what package fleet needs of an engine (its
// fleet.Engine interface): warm a peer's shape, say whether a shape is
// warmed, list the warmed shapes, tell idle from busy, and check a shape
// read from the network. Shapes travel as the integers of the bucket's
// keys.

// WarmShape runs a batch x seq chunk once on every loaded session and
// raises the coverage, as [Engine.Warm] does for one shape. Each run is
// queued behind the chunks a session already holds, so a warm-up never
// interrupts a run: it happens between runs. On TensorRT the run loads the
// engine a peer left in the shared engine cache, or compiles it.
//
// The shape comes from the network (a peer's record in the fleet bucket),
// so it must pass [Engine.ShapeAdmissible] first: it sizes the synthetic
// chunk's buffers.
func (e *Engine) WarmShape(ctx context.Context, batch, seq int) error {
	if err := e.ShapeAdmissible(batch, seq); err != nil {
		return err
	}
	return e.warm(ctx, []Shape{{Batch: batch, Seq: seq}})
}

// ErrShape means a batch x seq shape is one this engine would never run.
var ErrShape = errors.New("engine: shape not admissible")

// ShapeAdmissible reports, as an [ErrShape], why this engine would never
// run a batch x seq chunk, or nil if it might: the batch within MaxBatch,
// seq a tier (or past the last tier) within MaxTokens (which the memory
// budget may have lowered), and the chunk within the scheduler's budgets
// (MaxBatchTokens padded tokens and the memory budget's modelled
// workspace; a single row always fits, as in the scheduler). It is the one
// check for shapes read from the network.
func (e *Engine) ShapeAdmissible(batch, seq int) error {
	c := e.cfg
	pc := c.packConfig()
	switch {
	case batch < 1 || batch > c.MaxBatch:
		return fmt.Errorf("%w: batch %d outside 1..%d", ErrShape, batch, c.MaxBatch)
	case seq < 2 || seq > c.MaxTokens:
		return fmt.Errorf("%w: seq %d outside 2..%d", ErrShape, seq, c.MaxTokens)
	case pc.Tier(seq) != seq:
		return fmt.Errorf("%w: seq %d is not a tier", ErrShape, seq)
	case batch == 1:
		return nil
	case batch*seq > c.MaxBatchTokens:
		return fmt.Errorf("%w: %dx%d over %d padded tokens", ErrShape, batch, seq, c.MaxBatchTokens)
	case e.sched.memory > 0 && e.sched.cost.bytes(batch, seq) > float64(e.sched.memory):
		return fmt.Errorf("%w: %dx%d needs about %.0f MiB, over the memory budget of %d MiB a session", ErrShape, batch, seq, e.sched.cost.bytes(batch, seq)/(1<<20), e.sched.memory>>20)
	}
	return nil
}

// ShapeWarmed reports whether this engine has run the exact shape (or its
// coverage was raised with it).
func (e *Engine) ShapeWarmed(batch, seq int) bool {
	return e.cfg.Coverage.Warmed(batch, seq)
}

// WarmedShapes yields the warmed shapes (batch, seq) when the coverage is
// the in-memory [ShapeSet], by seq then batch; other coverages yield none.
func (e *Engine) WarmedShapes() iter.Seq2[int, int] {
	return func(yield func(int, int) bool) {
		ss, ok := e.cfg.Coverage.(*ShapeSet)
		if !ok {
			return
		}
		for _, sh := range ss.Shapes() {
			if !yield(sh.Batch, sh.Seq) {
				return
			}
		}
	}
}

// Activity tells an observer whether the engine is working: busy is true
// while an Embed call holds admitted tokens or a session has queued or
// running chunks; runs counts the session runs so far. An observer that
// sees busy false and the same runs across an interval knows the engine
// stayed idle in between, even if it missed short calls (they move runs).
func (e *Engine) Activity() (busy bool, runs int64) {
	queued, running := e.sched.busy()
	busy = e.adm.inUse() > 0 || e.adm.waiting() > 0 || queued > 0 || running > 0
	for _, s := range e.pool.sessions {
		runs += s.runs.Load()
	}
	return busy, runs
}

// CostModel is the run-time model in use: a*B*S + bq*B*S^2 seconds (plus
// a fixed cost per run, refitted from the runs).
func (e *Engine) CostModel() (a, bq float64) {
	e.sched.mu.Lock()
	defer e.sched.mu.Unlock()
	return e.sched.cost.a, e.sched.cost.bq
}

// Probe times the probe shapes and installs the fitted cost model, as New
// does with Config.Probe, and returns it (zeros when too few shapes fit).
// The fleet calls it, or [Engine.UseCost] with a peer's coefficients,
// right after New and before the engine serves.
func (e *Engine) Probe(ctx context.Context) (a, bq float64, err error) {
	if err := e.probe(ctx); err != nil {
		return 0, 0, err
	}
	a, bq = e.CostModel()
	return a, bq, nil
}

// UseCost installs a cost model measured elsewhere (a peer with the same
// model and hardware) instead of probing; runs keep refining it. The
// coefficients come from the network: they must be finite, not negative,
// not both zero, and price the longest single text at no more than
// [MaxModelledSeconds].
func (e *Engine) UseCost(a, bq float64) error {
	c := pack.Cost{A: a, Bq: bq}
	if !usableCost(c, e.cfg.MaxTokens) {
		return fmt.Errorf("%w: cost model %+v", ErrConfig, c)
	}
	e.setCost(c)
	return nil
}

// MaxModelledSeconds bounds what a cost model from elsewhere may say one
// text of the engine's max tokens costs: no real session takes an hour.
const MaxModelledSeconds = 3600

func usableCost(c pack.Cost, maxTokens int) bool {
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) && x >= 0 }
	if !finite(c.A) || !finite(c.Bq) || c.A == 0 && c.Bq == 0 {
		return false
	}
	of := c.Of(1, maxTokens)
	return of > 0 && of <= MaxModelledSeconds
}
