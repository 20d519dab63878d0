package bench

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/model"
	"github.com/jetembed/jetembed/engine/ort"
	"github.com/jetembed/jetembed/engine/tokenizer"
	"github.com/jetembed/jetembed/schema"
)

// stack is the model, its tokenizer and the way to open sessions, shared by
// every contender of the suite so they all run the same graph on the same
// token ids.
type stack struct {
	m        *model.Model
	tok      *tokenizer.Tokenizer
	provider ort.Provider
	sessions int
}

func openStack(cfg Config) (*stack, error) {
	if _, err := ort.Init(ort.LibraryOptions{Path: cfg.ORTLib}); err != nil {
		return nil, err
	}
	m, err := model.Open(cfg.ModelDir, model.DefaultOptions())
	if err != nil {
		return nil, err
	}
	if m.Layout != model.LayoutHidden {
		return nil, fmt.Errorf("bench: model %s has the %s layout; the baselines need last_hidden_state", m.Dir, m.Layout)
	}
	tok, err := tokenizer.Load(m.TokenizerPath)
	if err != nil {
		return nil, err
	}
	return &stack{m: m, tok: tok, provider: ort.Provider{IntraOpThreads: cfg.Threads}, sessions: cfg.Sessions}, nil
}

// engineConfig is the engine as serve configures it, with the cost probe
// on and a warm-up grid that stops at 1024 tokens: the default grid runs
// batch 2 at 8192 tokens, whose attention scores alone take gigabytes on a
// MiniLM-size CPU model, and the corpus has no text that long.
func (s *stack) engineConfig() engine.Config {
	// serve's CPU defaults: no warm-up grid, no probe (the run-time model
	// is fitted from the runs), chunks padded to their own longest text.
	return engine.Config{Sessions: s.sessions, PadExact: true, NoWarmup: true}
}

// openEngine opens the engine on real ONNX Runtime sessions, its memory
// model following their attention form as serve's does.
func (s *stack) openEngine(ctx context.Context) (*engine.Engine, error) {
	return s.openEngineWith(ctx, ort.PrecisionFP32)
}

// openEngineWith opens the engine with sessions of precision pr.
func (s *stack) openEngineWith(ctx context.Context, pr ort.Precision) (*engine.Engine, error) {
	e, _, err := s.openPrecision(ctx, pr)
	return e, err
}

// openInt8Engine opens the engine with int8 sessions and returns their
// plan; int8 refused by the canary is an error here.
func (s *stack) openInt8Engine(ctx context.Context) (*engine.Engine, ort.PrecisionPlan, error) {
	e, plan, err := s.openPrecision(ctx, ort.PrecisionInt8)
	if err == nil && !plan.Int8 {
		e.Close()
		return nil, plan, fmt.Errorf("bench: int8 refused: %s", plan)
	}
	return e, plan, err
}

func (s *stack) openPrecision(ctx context.Context, pr ort.Precision) (*engine.Engine, ort.PrecisionPlan, error) {
	return s.openConfigured(ctx, pr, s.engineConfig())
}

// openWeighted opens the fp32 engine as serve does with --tenant-weight:
// its admission queue weighs tenants by weights.
func (s *stack) openWeighted(ctx context.Context, weights map[string]int) (*engine.Engine, error) {
	cfg := s.engineConfig()
	cfg.TenantWeights = weights
	e, _, err := s.openConfigured(ctx, ort.PrecisionFP32, cfg)
	return e, err
}

func (s *stack) openConfigured(ctx context.Context, pr ort.Precision, cfg engine.Config) (*engine.Engine, ort.PrecisionPlan, error) {
	p := s.provider
	p.Precision = pr
	plan, err := ort.PlanAttention(s.m, p)
	if err != nil {
		return nil, ort.PrecisionPlan{}, err
	}
	if plan.Fused {
		cfg.Attention = engine.AttentionFused
	}
	if plan.Precision.Int8 {
		cfg.Precision = engine.PrecisionInt8
	}
	e, err := engine.New(ctx, cfg, engine.TokenizerFunc(s.tok.EncodeIDs), s.m, func(int) (engine.Runner, error) {
		return ort.Open(s.m, p)
	})
	return e, plan.Precision, err
}

// openNoop opens the same engine (tokenizer, packer, scheduler, heads) on
// sessions that return zeros at once: what is left is the cost of
// everything around session.Run. cost is the real engine's probed cost
// model, so that the no-op engine packs the same chunks; probing the no-op
// would time nothing.
func (s *stack) openNoop(ctx context.Context, cost engine.Cost) (*engine.Engine, error) {
	cfg := s.engineConfig()
	cfg.Probe = false
	cfg.Cost = cost
	return engine.New(ctx, cfg, engine.TokenizerFunc(s.tok.EncodeIDs), s.m, func(int) (engine.Runner, error) {
		return &noopRunner{dim: s.m.Config.HiddenSize}, nil
	})
}

// noopRunner returns a zero last_hidden_state of the right shape. The buffer
// only grows and is never written, so handing the same zeros to every run is
// safe.
type noopRunner struct {
	dim   int
	zeros []float32
}

func (r *noopRunner) Run(_ context.Context, in engine.RunInput) (engine.RunOutput, error) {
	n := in.Batch * in.Seq * r.dim
	if len(r.zeros) < n {
		r.zeros = make([]float32, n)
	}
	return engine.RunOutput{Hidden: r.zeros[:n], Dim: r.dim}, nil
}

func (r *noopRunner) Close() error { return nil }

// runnerPool hands out sessions to the baselines, one goroutine at a time
// per session.
type runnerPool struct {
	free chan engine.Runner
	all  []engine.Runner
}

func (s *stack) openRunners() (*runnerPool, error) {
	p := &runnerPool{free: make(chan engine.Runner, s.sessions)}
	for range s.sessions {
		r, err := ort.Open(s.m, s.provider)
		if err != nil {
			p.Close()
			return nil, err
		}
		p.all = append(p.all, r)
		p.free <- r
	}
	return p, nil
}

func (p *runnerPool) Close() {
	for _, r := range p.all {
		r.Close()
	}
}

// padded builds one chunk of the token ids, right-padded to the longest.
func padded(ids [][]int32, pad int64) engine.RunInput {
	seq := 0
	for _, x := range ids {
		seq = max(seq, len(x))
	}
	in := engine.RunInput{Batch: len(ids), Seq: seq,
		IDs: make([]int64, len(ids)*seq), Mask: make([]int64, len(ids)*seq)}
	for b, x := range ids {
		row := in.IDs[b*seq : (b+1)*seq]
		for i := range row {
			row[i] = pad
		}
		for i, id := range x {
			row[i] = int64(id)
			in.Mask[b*seq+i] = 1
		}
	}
	return in
}

// clsDense is the BGE-M3 dense vector of row b: the L2-normalized CLS
// hidden state.
func clsDense(out engine.RunOutput, b, seq int) []float32 {
	h := out.Hidden[b*seq*out.Dim : b*seq*out.Dim+out.Dim]
	var ss float64
	for _, v := range h {
		ss += float64(v) * float64(v)
	}
	inv := float32(1 / math.Max(math.Sqrt(ss), 1e-12))
	d := make([]float32, len(h))
	for i, v := range h {
		d[i] = v * inv
	}
	return d
}

// naiveEmbedder is the baseline a first attempt would write: every Embed
// call (one job, with MaxBatchJobs 1) tokenizes its texts and makes one
// session run padded to its longest text, with no packing across jobs.
type naiveEmbedder struct {
	s    *stack
	pool *runnerPool
	// mu guards the padding counters.
	mu             sync.Mutex
	tokens, padded int
}

func (n *naiveEmbedder) Embed(ctx context.Context, texts []engine.Text, call engine.Call) ([]engine.Embedding, engine.CallReport, error) {
	maxTok := n.s.m.Config.MaxTokens
	ids := make([][]int32, len(texts))
	out := make([]engine.Embedding, len(texts))
	real := 0
	for i, t := range texts {
		enc := n.s.tok.Encode(t.Text, tokenizer.Options{AddSpecialTokens: true, MaxTokens: maxTok})
		ids[i] = enc.IDs
		out[i].Tokens, out[i].Truncated = enc.Count, enc.Count > len(enc.IDs)
		real += len(enc.IDs)
	}
	in := padded(ids, int64(n.s.m.Config.PadID))
	r := <-n.pool.free
	res, err := r.Run(ctx, in)
	n.pool.free <- r
	if err != nil {
		return nil, engine.CallReport{}, schema.Errorf(schema.CodeInternal, "naive run: %v", err)
	}
	for i := range out {
		out[i].Dense = clsDense(res, i, in.Seq)
	}
	n.mu.Lock()
	n.tokens += real
	n.padded += in.Batch * in.Seq
	n.mu.Unlock()
	return out, engine.CallReport{Tokens: real, PaddedTokens: in.Batch * in.Seq}, nil
}

func (n *naiveEmbedder) ModelID() string { return n.s.m.ID }

func (n *naiveEmbedder) MaxTokens() int { return n.s.m.Config.MaxTokens }
