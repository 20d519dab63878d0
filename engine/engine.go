package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/jetembed/jetembed/engine/internal/heads"
	"github.com/jetembed/jetembed/engine/internal/pack"
	"github.com/jetembed/jetembed/engine/model"
	"github.com/jetembed/jetembed/schema"
)

// Engine embeds texts with one model over a pool of sessions. It is safe
// for concurrent use; Close releases the sessions.
type Engine struct {
	cfg     Config
	tok     Tokenizer
	model   *model.Model
	weights *heads.Weights // hidden-state layout only
	special heads.Special
	pool    *pool
	sched   *sched
	adm     *admission
	// ranMu serializes ran, so OnWarmed hears each new shape once even
	// when two sessions finish it at the same moment.
	ranMu sync.Mutex
	fatal fatalState
	// warmFailed are the grid shapes that failed in best-effort warm-up.
	warmFailed []error
}

// New loads cfg.Sessions sessions through factory, runs the warm-up grid
// (and the cost probe when asked) and returns a ready engine. ctx bounds
// the start-up only.
func New(ctx context.Context, cfg Config, tok Tokenizer, m *model.Model, factory RunnerFactory) (*Engine, error) {
	cost := newCostModelFor(m.Config, cfg.Attention, cfg.Precision)
	explicit := cfg.Warmup != nil
	memMax := cost.maxSeq(cfg.chunkMemory())
	if memMax < 2 {
		return nil, fmt.Errorf("%w: memory budget %d bytes holds no text (one of 2 tokens needs %.0f a session)", ErrConfig, cfg.MemoryBudget, cost.bytes(1, 2))
	}
	// A text the budget cannot hold even alone is cut to what fits (or
	// fails text_too_long): the budget lowers the engine's maximum.
	cfg = cfg.WithDefaults(min(m.Config.MaxTokens, memMax))
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var err error
	if cfg.Warmup, err = fitWarmup(cfg, cost, explicit); err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, tok: tok, model: m}
	e.adm = newAdmission(cfg)
	if m.Layout == model.LayoutHidden {
		e.weights = &heads.Weights{
			Dim:     m.Config.HiddenSize,
			SparseW: m.Sparse.W, SparseBias: m.Sparse.B,
			ColBERTDim: m.ColBERT.Dim, ColBERTW: m.ColBERT.W, ColBERTB: m.ColBERT.B,
		}
		if err := e.weights.Validate(); err != nil {
			return nil, err
		}
	}
	e.special = e.sparseSkip()
	e.sched = newSched(cfg, cost, e.refused)
	e.sched.weight = e.adm.weight // one weight a tenant, in admission and in run order
	if cfg.Cost != (pack.Cost{}) {
		cost.use(cfg.Cost)
	}

	var rewarm func() []RunInput
	if cfg.Guard {
		rewarm = e.rewarmInputs
	}
	e.fatal.init()
	if e.pool, err = newPool(cfg, e.fatal.watch(factory), e.sched, e.input, e.ran, rewarm); err != nil {
		return nil, err
	}
	if err := e.warmGrid(ctx, cfg.Warmup); err != nil {
		e.pool.close()
		return nil, err
	}
	if cfg.Probe && cfg.Cost == (pack.Cost{}) {
		if err := e.probe(ctx); err != nil {
			e.pool.close()
			return nil, err
		}
	}
	return e, nil
}

// fitWarmup keeps the warm-up shapes whose workspace fits the memory
// budget: a default grid drops the others, a given one is refused.
func fitWarmup(cfg Config, cost *costModel, explicit bool) ([]Shape, error) {
	budget := cfg.chunkMemory()
	if budget <= 0 {
		return cfg.Warmup, nil
	}
	var out []Shape
	for _, sh := range cfg.Warmup {
		if b := cost.bytes(sh.Batch, sh.Seq); b > float64(budget) {
			if explicit {
				return nil, fmt.Errorf("%w: warm-up shape %v needs about %.0f MiB, above the memory budget of %d MiB a session", ErrConfig, sh, b/(1<<20), budget>>20)
			}
			continue
		}
		out = append(out, sh)
	}
	return out, nil
}

func (e *Engine) sparseSkip() heads.Special {
	c := e.model.Config
	s := heads.Special{int32(c.BOSID), int32(c.EOSID), int32(c.PadID)}
	if e.cfg.SparseSkip != nil {
		s = append(s, e.cfg.SparseSkip...)
	} else {
		s = append(s, 3) // XLM-R <unk>
	}
	slices.Sort(s)
	return slices.Compact(s)
}

// setCost installs a probed or given run-time model in the scheduler.
func (e *Engine) setCost(c pack.Cost) {
	e.sched.mu.Lock()
	e.sched.cost.use(c)
	e.sched.mu.Unlock()
}

// ran records a shape that ran on some session, calling OnWarmed the first
// time.
func (e *Engine) ran(s Shape) {
	if e.cfg.PadExact {
		// Nothing compiles per shape; the record keeps tiers, so it stays
		// small however many exact lengths run.
		s.Seq = e.sched.tier(s.Seq)
	}
	if e.cfg.Coverage.Warmed(s.Batch, s.Seq) {
		return // the common case, without the lock
	}
	e.ranMu.Lock()
	defer e.ranMu.Unlock()
	if e.cfg.Coverage.Warmed(s.Batch, s.Seq) {
		return
	}
	e.cfg.Coverage.Raise(s.Batch, s.Seq)
	if e.cfg.OnWarmed != nil {
		e.cfg.OnWarmed(s)
	}
}

// ModelID is the id of the engine's model (name@sha256-prefix).
func (e *Engine) ModelID() string { return e.model.ID }

// ModelFingerprint is a digest of every file of the engine's model
// ([model.Model.Fingerprint]): what the result cache's keys name.
func (e *Engine) ModelFingerprint() string { return e.model.Fingerprint() }

// Precision names the sessions' arithmetic ("fp32", "int8"): what the
// result cache's keys name, so that no vector of one precision answers a
// text embedded in another.
func (e *Engine) Precision() string { return e.cfg.Precision.String() }

// MaxTokens is the longest text, in tokens, the engine runs untruncated.
func (e *Engine) MaxTokens() int { return e.cfg.MaxTokens }

// Coverage is the engine's warmed-shape record.
func (e *Engine) Coverage() Coverage { return e.cfg.Coverage }

// Close stops the sessions and waits for running chunks to finish; calls
// still waiting for room fail engine_unavailable.
func (e *Engine) Close() error {
	e.adm.failAll(runError(ErrClosed))
	e.pool.close()
	return nil
}

// Embed embeds texts, in order, admitted as call says. Its texts join
// the engine's one queue (see [Call]: they wait there for room in their
// class's budget, tenants in turn) and the call returns as soon as its own
// texts are embedded. Items fail alone (invalid_utf8, text_too_long, or
// the retriable shape_not_warmed / engine_unavailable of their chunk;
// deadline_exceeded when ctx ends while they wait to run) in
// Embedding.Err. The call fails as a whole, with a *schema.Error, only
// when it is refused before running: overloaded (no room before its
// MaxWait or its deadline, the interactive queue full, or
// [Call.NoWait] with the budget full), result_too_large (its vectors
// exceed [Call.OutputLimit]) or deadline_exceeded (ctx ended, or its
// [Call.Deadline] passed, while it waited). After Close every item fails
// with engine_unavailable.
func (e *Engine) Embed(ctx context.Context, texts []Text, opts Call) ([]Embedding, CallReport, error) {
	if err := ctx.Err(); err != nil {
		return nil, CallReport{}, schema.Errorf(schema.CodeDeadlineExceeded, "%v", err)
	}
	if opts.Class >= nClasses {
		opts.Class = Bulk
	}
	if len(texts) == 0 && opts.Hold > 0 {
		return nil, CallReport{}, e.hold(ctx, opts)
	}
	out := make([]Embedding, len(texts))
	toks := e.tokenize(ctx, texts, out)
	var items, lengths []int
	total := 0
	for i, t := range toks {
		if t.err != nil {
			out[i].Err = t.err
			continue
		}
		items, lengths = append(items, i), append(lengths, len(t.ids))
		total += len(t.ids)
	}
	if total == 0 {
		return out, CallReport{}, nil
	}
	if err := e.checkOutputLimit(opts.OutputLimit, opts.Copies, texts, toks); err != nil {
		return nil, CallReport{}, err
	}
	held, se := e.adm.acquire(ctx, opts, total)
	if se != nil {
		return nil, CallReport{}, se
	}
	release := sync.OnceFunc(func() { e.adm.release(opts.Class, held) })
	if opts.Admitted != nil {
		opts.Admitted(release)
	} else {
		defer release()
	}
	if e.pool.available() == 0 {
		fail(out, items, runError(ErrUnavailable))
		return out, CallReport{}, nil
	}
	c := &call{ctx: ctx, class: opts.Class, tenant: opts.Tenant, toks: toks, done: make(chan chunkDone, len(items))}
	if err := e.sched.enqueue(c, items, lengths); err != nil {
		fail(out, items, runError(err))
		return out, CallReport{}, nil
	}
	rep := e.wait(ctx, c, texts, out, len(items))
	if err := e.FatalErr(); err != nil {
		// No text of this call is worth keeping: the process is going.
		return nil, rep, fmt.Errorf("%w: %w", ErrFatal, err)
	}
	return out, rep, nil
}

// hold admits a call of opts.Hold tokens that runs nothing ([Call.Hold]).
func (e *Engine) hold(ctx context.Context, opts Call) error {
	held, se := e.adm.acquire(ctx, opts, opts.Hold)
	if se != nil {
		return se
	}
	release := sync.OnceFunc(func() { e.adm.release(opts.Class, held) })
	if opts.Admitted == nil {
		release()
		return nil
	}
	opts.Admitted(release)
	return nil
}

// wait collects the call's chunks as sessions finish them, applying the
// heads concurrently, until every queued text is done or ctx ends.
func (e *Engine) wait(ctx context.Context, c *call, texts []Text, out []Embedding, pending int) CallReport {
	var rep CallReport
	var wg sync.WaitGroup
	reported := make([]bool, len(texts))
	for pending > 0 {
		select {
		case d := <-c.done:
			pending -= len(d.items)
			for _, it := range d.items {
				reported[it] = true
			}
			rep.Chunks = append(rep.Chunks, ChunkReport{
				Session: d.session, Batch: d.batch, Seq: d.seq, Texts: len(d.items),
				RealTokens: d.real, PaddedTokens: len(d.items) * d.seq, Items: d.items,
			})
			if d.err != nil {
				if d.err.Code == schema.CodeShapeNotWarmed { // only the JIT guard refuses so
					if m := e.pool.recorder(); m != nil {
						m.GuardRefusal(ctx)
					}
				}
				fail(out, d.items, d.err)
				continue
			}
			rep.Tokens += d.real
			rep.PaddedTokens += len(d.items) * d.seq
			rep.Compute += d.took
			wg.Go(func() {
				if err := e.collect(d.items, d.rows, d.batch, d.seq, d.out, texts, c.toks, out); err != nil {
					fail(out, d.items, schema.Errorf(schema.CodeInternal, "%v", err))
				}
			})
		case <-ctx.Done():
			e.sched.remove(c)
			err := schema.Errorf(schema.CodeDeadlineExceeded, "%v", ctx.Err())
			for i := range texts {
				if !reported[i] && c.toks[i].err == nil {
					out[i].Err = err
				}
			}
			pending = 0
		}
	}
	wg.Wait()
	return rep
}

// refused reports whether the JIT guard refuses chunks of seq: a long
// sequence no session has warmed would compile in band, for minutes on
// TensorRT, holding the session and every job queued behind it.
func (e *Engine) refused(seq int) bool {
	return e.cfg.Guard && seq >= e.cfg.GuardSeq && seq > e.cfg.Coverage.Ceiling()
}

func fail(out []Embedding, items []int, err *schema.Error) {
	for _, it := range items {
		out[it].Err = err
	}
}

// runError maps a failed run to the item error clients act on.
func runError(err error) *schema.Error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return schema.Errorf(schema.CodeDeadlineExceeded, "%v", err)
	}
	// A session error, an unloaded pool or a closed engine are retriable:
	// the breaker reloads the session, or another consumer takes the chunk.
	return schema.Errorf(schema.CodeEngineUnavailable, "%v", err)
}

// Health reports whether the engine can run chunks now: it is open and at
// least one session is loaded.
func (e *Engine) Health(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e.sched.mu.Lock()
	closed := e.sched.closed
	e.sched.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if err := e.FatalErr(); err != nil {
		return fmt.Errorf("%w: %w", ErrFatal, err)
	}
	if e.pool.available() == 0 {
		return ErrUnavailable
	}
	return nil
}

// Canary embeds a fixed text through the whole path (tokenizer, packer, a
// session, heads) and checks the dense vector: the deep readiness probe.
func (e *Engine) Canary(ctx context.Context) error {
	embs, _, err := e.Embed(ctx, []Text{{Text: "jetembed canary", Outputs: Dense, Truncate: true}}, Call{NoWait: true})
	if err != nil {
		return err
	}
	if embs[0].Err != nil {
		return embs[0].Err
	}
	var ss float64
	for _, x := range embs[0].Dense {
		ss += float64(x) * float64(x)
	}
	if ss < 0.99 || ss > 1.01 {
		return fmt.Errorf("engine: canary dense vector has squared norm %g, want 1", ss)
	}
	return nil
}
