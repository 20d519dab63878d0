package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jetembed/jetembed/engine/internal/pack"
)

// Warm runs each shape once on every loaded session and records it in the
// coverage (calling OnWarmed the first time), all sessions at once per
// shape, like the grid New runs. The fleet pre-warms a peer's shape with
// [Engine.WarmShape] instead, queued between the runs sessions already hold.
func (e *Engine) Warm(ctx context.Context, shapes []Shape) error {
	return e.warm(ctx, shapes)
}

// warm runs the shapes in order; each shape runs on all sessions at once
// (one per GPU compiles in parallel), and the next starts when all are done.
func (e *Engine) warm(ctx context.Context, shapes []Shape) error {
	for _, sh := range shapes {
		errs := make(chan error, len(e.pool.sessions))
		for s := range e.pool.sessions {
			go func() {
				_, err := e.runShape(ctx, sh, s)
				errs <- err
			}()
		}
		var first error
		warmed := 0
		for range e.pool.sessions {
			switch err := <-errs; {
			case err == nil:
				warmed++
			case errors.Is(err, ErrUnavailable):
				// A session that is down (reloading) is skipped, as New
				// serves with the sessions that loaded.
			case first == nil:
				first = err
			}
		}
		if first == nil && warmed == 0 {
			first = ErrUnavailable
		}
		if first != nil {
			return fmt.Errorf("engine: warm-up %v: %w", sh, first)
		}
	}
	return nil
}

// warmGrid runs the start-up grid. By default a shape that fails fails
// New; with WarmupBestEffort it is recorded ([Engine.WarmupFailures]) and
// skipped, so the coverage (and the JIT guard's ceiling) holds only the
// shapes that ran. A fatal engine-build error fails New either way.
func (e *Engine) warmGrid(ctx context.Context, grid []Shape) error {
	if !e.cfg.WarmupBestEffort {
		return e.warm(ctx, grid)
	}
	for _, sh := range grid {
		err := e.warm(ctx, []Shape{sh})
		if err != nil && (IsFatal(err) || ctx.Err() != nil) {
			return err
		}
		if err != nil {
			e.warmFailed = append(e.warmFailed, err)
		}
	}
	return nil
}

// WarmupFailures are the grid shapes that failed to warm up in best-effort
// mode (Config.WarmupBestEffort), one error each.
func (e *Engine) WarmupFailures() []error { return slices.Clone(e.warmFailed) }

// runShape runs a synthetic chunk of the given shape on session s, or the least-loaded one if
// s < 0, and returns how long the run took.
func (e *Engine) runShape(ctx context.Context, sh Shape, s int) (time.Duration, error) {
	if sh.Seq > e.cfg.MaxTokens {
		return 0, fmt.Errorf("%w: shape %v exceeds max tokens %d", ErrConfig, sh, e.cfg.MaxTokens)
	}
	if b := e.sched.cost.bytes(sh.Batch, sh.Seq); e.sched.memory > 0 && b > float64(e.sched.memory) {
		return 0, fmt.Errorf("%w: shape %v needs about %.0f MiB, above the memory budget", ErrConfig, sh, b/(1<<20))
	}
	in := e.synthetic(sh)
	done := make(chan result, 1)
	start := time.Now()
	if err := e.pool.dispatch(task{in: in, done: done}, s); err != nil {
		return 0, err
	}
	select {
	case r := <-done:
		return time.Since(start), r.err
	case <-ctx.Done():
		// The task stays queued and runs later; its result is dropped.
		return 0, ctx.Err()
	}
}

// synthetic is a chunk of the given shape: full rows of real tokens, so
// no work is skipped.
func (e *Engine) synthetic(sh Shape) RunInput {
	c := e.model.Config
	filler := int64(c.EOSID)
	if c.VocabSize > 5 {
		filler = 5 // an ordinary token in XLM-R's vocabulary
	}
	in := RunInput{Batch: sh.Batch, Seq: sh.Seq, IDs: make([]int64, sh.Batch*sh.Seq), Mask: make([]int64, sh.Batch*sh.Seq)}
	for r := 0; r < sh.Batch; r++ {
		row := in.IDs[r*sh.Seq : (r+1)*sh.Seq]
		for j := range row {
			row[j] = filler
			in.Mask[r*sh.Seq+j] = 1
		}
		row[0], row[len(row)-1] = int64(c.BOSID), int64(c.EOSID)
	}
	return in
}

// rewarmInputs are the shapes a session reloaded by the breaker runs again
// when the guard is on: the warmed shapes of a [ShapeSet] coverage, else
// the configured grid.
func (e *Engine) rewarmInputs() []RunInput {
	shapes := e.cfg.Warmup
	if ss, ok := e.cfg.Coverage.(*ShapeSet); ok {
		shapes = ss.Shapes()
	}
	ins := make([]RunInput, 0, len(shapes))
	for _, sh := range shapes {
		if sh.Seq <= e.cfg.MaxTokens {
			ins = append(ins, e.synthetic(sh))
		}
	}
	return ins
}

// probeShapes are the shapes timed to fit the cost model: about the same
// tokens at different sequence lengths, so the fit tells the linear term
// from the attention term.
func (e *Engine) probeShapes() []Shape {
	budget := min(e.cfg.MaxBatchTokens, 2048)
	var out []Shape
	for _, seq := range []int{32, 128, 512} {
		if seq > e.cfg.MaxTokens || seq > budget || e.refused(seq) {
			break // the guard keeps probes off unwarmed long shapes too
		}
		out = append(out, Shape{Batch: max(1, min(e.cfg.MaxBatch, budget/seq)), Seq: seq})
	}
	return out
}

// probe times the probe shapes (best of three, after one untimed run) and
// fits the cost model used for scheduling and MaxChunkSeconds.
func (e *Engine) probe(ctx context.Context) error {
	var samples []pack.Sample
	for _, sh := range e.probeShapes() {
		best := time.Duration(1<<63 - 1)
		for i := 0; i < 4; i++ {
			d, err := e.runShape(ctx, sh, -1)
			if err != nil {
				return fmt.Errorf("engine: cost probe %v: %w", sh, err)
			}
			if i > 0 {
				best = min(best, d)
			}
		}
		samples = append(samples, pack.Sample{Batch: sh.Batch, Seq: sh.Seq, Cost: best.Seconds()})
	}
	cost, err := pack.Fit(samples)
	if err != nil {
		// Too few shapes fit under MaxTokens: keep scheduling by tokens.
		return nil
	}
	e.setCost(cost)
	return nil
}
