package fleet

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/model"
	"github.com/jetembed/jetembed/engine/tokenizer"
)

// costSource names the published figure the default cost model follows.
const costSource = "TEI (text-embeddings-inference) serving BAAI/bge-large-en-v1.5 on one NVIDIA L4: " +
	"~62k tokens/s, from the infinity project's benchmark (michaelfeil.eu/infinity, 'Benchmarking details': " +
	"1 request = 256 sentences / 115,000 tokens, TEI ~0.54 req/s on the L4). BGE-M3 has the same 24-layer, " +
	"1024-wide encoder as bge-large, so its per-token compute is alike"

// gpuCost is the fake GPU: a session run of batch x seq takes Overhead +
// batch*seq/TokensPerSec (padded tokens cost what real ones do). A shape
// of at least PlanSeq tokens needs a plan, as TensorRT does: the first run
// of one on a session builds it in Compile, or loads the plan a peer built
// (from the shared engine cache) in Load, instead of the run's own time.
type gpuCost struct {
	TokensPerSec  float64
	Overhead      time.Duration
	PlanSeq       int
	Compile, Load time.Duration
}

func defaultCost() gpuCost {
	return gpuCost{TokensPerSec: 62000, Overhead: 2 * time.Millisecond, PlanSeq: 4096,
		Compile: 3 * time.Second, Load: 200 * time.Millisecond}
}

func (c gpuCost) run(batch, seq int) time.Duration {
	return c.Overhead + time.Duration(float64(batch*seq)/c.TokensPerSec*float64(time.Second))
}

// planCache is the fleet's shared engine cache: which plan shapes were
// built, how often each was compiled, and when each member had loaded one.
type planCache struct {
	mu       sync.Mutex
	built    map[engine.Shape]time.Time
	compiles map[engine.Shape]int
	loaded   map[engine.Shape]map[string]time.Time // shape -> member -> when
}

func newPlanCache() *planCache {
	return &planCache{built: map[engine.Shape]time.Time{}, compiles: map[engine.Shape]int{},
		loaded: map[engine.Shape]map[string]time.Time{}}
}

// take says how long a member's first run of s takes beyond the run
// itself: a compile when no plan exists (the plan then exists), a load
// otherwise. Two members that both find no plan both compile: that is the
// waste the fleet's compile lock is for, and what the count shows.
func (p *planCache) take(s engine.Shape, c gpuCost) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.built[s]; ok {
		return c.Load
	}
	p.compiles[s]++
	p.built[s] = time.Now().Add(c.Compile)
	return c.Compile
}

func (p *planCache) markLoaded(s engine.Shape, member string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.loaded[s] == nil {
		p.loaded[s] = map[string]time.Time{}
	}
	if _, ok := p.loaded[s][member]; !ok {
		p.loaded[s][member] = time.Now()
	}
}

func (p *planCache) compileCount(s engine.Shape) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.compiles[s]
}

func (p *planCache) loadedAt(s engine.Shape) map[string]time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]time.Time, len(p.loaded[s]))
	for m, at := range p.loaded[s] {
		out[m] = at
	}
	return out
}

// gpuRunner is one session on the fake GPU. A session runs on one
// goroutine, so its own plan set needs no lock.
type gpuRunner struct {
	member string
	cost   gpuCost
	plans  *planCache
	have   map[engine.Shape]bool
	dim    int
	zeros  []float32
}

func (r *gpuRunner) Run(ctx context.Context, in engine.RunInput) (engine.RunOutput, error) {
	d := r.cost.run(in.Batch, in.Seq)
	s := engine.Shape{Batch: in.Batch, Seq: in.Seq}
	if in.Seq >= r.cost.PlanSeq && !r.have[s] {
		d = r.plans.take(s, r.cost)
	}
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		return engine.RunOutput{}, ctx.Err()
	}
	if in.Seq >= r.cost.PlanSeq && !r.have[s] {
		r.have[s] = true
		r.plans.markLoaded(s, r.member)
	}
	n := in.Batch * in.Seq * r.dim
	if len(r.zeros) < n {
		r.zeros = make([]float32, n)
	}
	return engine.RunOutput{Hidden: r.zeros[:n], Dim: r.dim}, nil
}

func (r *gpuRunner) Close() error { return nil }

// modelFiles is the committed tiny model: its tokenizer and config make
// the engine tokenize and pack as it would BGE-M3's; its graph is never
// run.
type modelFiles struct {
	m   *model.Model
	tok *tokenizer.Tokenizer
}

func openModel(t testing.TB) modelFiles {
	t.Helper()
	m, err := model.Open(filepath.Join("..", "..", "..", "..", "testdata", "models", "tiny-hidden"), model.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(m.TokenizerPath)
	if err != nil {
		t.Fatal(err)
	}
	return modelFiles{m: m, tok: tok}
}

// openGPU opens the real engine (tokenizer, packer, scheduler, heads) of
// one member on one fake-GPU session, packing by the same cost model.
func openGPU(ctx context.Context, mf modelFiles, member string, c gpuCost, plans *planCache) (*engine.Engine, error) {
	cfg := engine.Config{Sessions: 1, NoWarmup: true, MaxTokens: 8192,
		Cost: engine.Cost{A: 1 / c.TokensPerSec}}
	return engine.New(ctx, cfg, engine.TokenizerFunc(mf.tok.EncodeIDs), mf.m, func(int) (engine.Runner, error) {
		return &gpuRunner{member: member, cost: c, plans: plans, have: map[engine.Shape]bool{},
			dim: mf.m.Config.HiddenSize}, nil
	})
}
