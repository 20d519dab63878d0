package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/jetembed/jetembed/engine/heads"
	"github.com/jetembed/jetembed/engine/model"
	"github.com/jetembed/jetembed/engine/pack"
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
	adm     *admission
	packers sync.Pool // *pack.Packer: packers keep buffers, one call at a time
	packCfg pack.Config
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
	cfg = cfg.WithDefaults(m.Config.MaxTokens)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, tok: tok, model: m, adm: &admission{cap: cfg.InflightTokens}}
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
	e.setCost(cfg.Cost)

	var err error
	var rewarm func() []RunInput
	if cfg.Guard {
		rewarm = e.rewarmInputs
	}
	e.fatal.init()
	if e.pool, err = newPool(cfg, e.fatal.watch(factory), e.ran, rewarm); err != nil {
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

// setCost installs a cost model in the packers (new packers pick it up).
func (e *Engine) setCost(c pack.Cost) {
	e.cfg.Cost = c
	e.packCfg = e.cfg.packConfig()
	e.packers = sync.Pool{}
}

// ran records a shape that ran on some session, calling OnWarmed the first
// time.
func (e *Engine) ran(s Shape) {
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

// MaxTokens is the longest text, in tokens, the engine runs untruncated.
func (e *Engine) MaxTokens() int { return e.cfg.MaxTokens }

// Coverage is the engine's warmed-shape record.
func (e *Engine) Coverage() Coverage { return e.cfg.Coverage }

// Close stops the sessions and waits for running chunks to finish.
func (e *Engine) Close() error {
	e.pool.close()
	return nil
}

// Embed embeds texts, in order. Items fail alone (invalid_utf8,
// text_too_long, or the retriable shape_not_warmed / engine_unavailable of
// their chunk; deadline_exceeded when ctx ends while their chunk waits) in
// Embedding.Err. The call fails as a whole, with a *schema.Error, only when
// it is refused before running: overloaded (the in-flight budget is full;
// see [WithAdmissionWait]) or deadline_exceeded. After Close every item
// fails with engine_unavailable.
func (e *Engine) Embed(ctx context.Context, texts []Text) ([]Embedding, Report, error) {
	if err := ctx.Err(); err != nil {
		return nil, Report{}, schema.Errorf(schema.CodeDeadlineExceeded, "%v", err)
	}
	out := make([]Embedding, len(texts))
	toks := e.tokenize(texts, out)
	lengths := make([]int, len(texts))
	total := 0
	for i, t := range toks {
		if t.err != nil {
			out[i].Err = t.err
			continue
		}
		lengths[i] = len(t.ids)
		total += len(t.ids)
	}
	var rep Report
	if total == 0 {
		return out, rep, nil
	}
	held, err := e.adm.acquire(ctx, total, waits(ctx))
	switch {
	case errors.Is(err, errOverloaded):
		return nil, rep, schema.Errorf(schema.CodeOverloaded, "%d tokens in flight, budget %d", e.adm.inUse(), e.cfg.InflightTokens)
	case err != nil:
		return nil, rep, schema.Errorf(schema.CodeDeadlineExceeded, "waiting for capacity: %v", err)
	}
	defer e.adm.release(held)

	results := make(chan result, len(texts))
	pending := 0
	for _, c := range e.pack(lengths) {
		ci := len(rep.Chunks)
		rep.Chunks = append(rep.Chunks, ChunkReport{
			Session: -1, Batch: c.Batch(), Seq: c.Seq, Texts: c.Batch(),
			RealTokens: c.RealTokens, PaddedTokens: c.PaddedTokens(), Items: c.Items,
		})
		if e.refused(c.Seq) {
			fail(out, c.Items, schema.Errorf(schema.CodeShapeNotWarmed,
				"chunk %dx%d is above the warmed ceiling %d", c.Batch(), c.Seq, e.cfg.Coverage.Ceiling()))
			continue
		}
		t := task{ctx: ctx, in: e.input(c.Items, c.Seq, toks), load: e.load(c.Batch(), c.Seq), chunk: ci, done: results}
		if err := e.pool.dispatch(t, -1); err != nil {
			fail(out, c.Items, runError(err))
			continue
		}
		pending++
	}

	var wg sync.WaitGroup
	for ; pending > 0; pending-- {
		r := <-results
		c := &rep.Chunks[r.chunk]
		c.Session = r.session
		if r.err != nil {
			fail(out, c.Items, runError(r.err))
			continue
		}
		rep.Tokens += c.RealTokens
		rep.PaddedTokens += c.PaddedTokens
		wg.Go(func() {
			if err := e.collect(c.Items, c.Seq, r.out, texts, toks, out); err != nil {
				fail(out, c.Items, schema.Errorf(schema.CodeInternal, "%v", err))
			}
		})
	}
	wg.Wait()
	if err := e.FatalErr(); err != nil {
		// No text of this call is worth keeping: the process is going.
		return nil, rep, fmt.Errorf("%w: %w", ErrFatal, err)
	}
	return out, rep, nil
}

// refused reports whether the JIT guard refuses chunks of seq: a long
// sequence no session has warmed would compile in band, for minutes on
// TensorRT, holding the session and every job queued behind it.
func (e *Engine) refused(seq int) bool {
	return e.cfg.Guard && seq >= e.cfg.GuardSeq && seq > e.cfg.Coverage.Ceiling()
}

// pack packs lengths, returning chunks whose items the caller owns.
func (e *Engine) pack(lengths []int) []pack.Chunk {
	p, _ := e.packers.Get().(*pack.Packer)
	if p == nil {
		var err error
		if p, err = pack.New(e.packCfg); err != nil {
			panic(err) // validated in New
		}
	}
	chunks := slices.Clone(p.Pack(lengths))
	for i := range chunks {
		chunks[i].Items = slices.Clone(chunks[i].Items)
	}
	e.packers.Put(p)
	return chunks
}

// load is a chunk's weight for least-loaded scheduling: its modelled cost
// in nanoseconds, or its padded tokens when there is no cost model.
func (e *Engine) load(batch, seq int) int64 {
	if e.cfg.Cost == (pack.Cost{}) {
		return int64(batch * seq)
	}
	return max(int64(e.cfg.Cost.Of(batch, seq)*1e9), 1)
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
	e.pool.mu.RLock()
	closed := e.pool.closed
	e.pool.mu.RUnlock()
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
	embs, _, err := e.Embed(ctx, []Text{{Text: "jetembed canary", Outputs: Dense, Truncate: true}})
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
