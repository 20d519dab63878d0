package engine

import (
	"context"
	"fmt"
	"iter"

	"github.com/jetembed/jetembed/engine/pack"
)

// The methods in this file let the fleet (package jetstream, which must
// not import engine) drive an engine through plain integers: an interface
// declared there is satisfied by *Engine without naming [Shape].

// WarmShape runs a batch x seq chunk once on every loaded session and
// raises the coverage, as [Engine.Warm] does for one shape. Each run is
// queued behind the chunks a session already holds, so a warm-up never
// interrupts a run: it happens between runs. On TensorRT the run loads the
// engine a peer left in the shared engine cache, or compiles it.
func (e *Engine) WarmShape(ctx context.Context, batch, seq int) error {
	return e.warm(ctx, []Shape{{Batch: batch, Seq: seq}})
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
	busy = e.adm[bulk].inUse() > 0 || e.adm[interactive].inUse() > 0 || queued > 0 || running > 0
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
// model and hardware) instead of probing. Runs keep refining it.
func (e *Engine) UseCost(a, bq float64) error {
	c := pack.Cost{A: a, Bq: bq}
	if a < 0 || bq < 0 || a == 0 && bq == 0 {
		return fmt.Errorf("%w: cost model %+v", ErrConfig, c)
	}
	e.setCost(c)
	return nil
}
