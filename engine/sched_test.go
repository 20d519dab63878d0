package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jetembed/jetembed/engine/internal/pack"
	"github.com/jetembed/jetembed/internal/testkit"
	"github.com/jetembed/jetembed/schema"
)

// gated is a fake session pool whose runs wait for a release each and
// report their inputs in the order they started.
type gated struct {
	started chan RunInput
	release chan struct{}
}

func newGated() *gated {
	return &gated{started: make(chan RunInput, 64), release: make(chan struct{}, 64)}
}

func (g *gated) factory() *factory {
	return &factory{mk: func(int) *fakeRunner {
		return &fakeRunner{inRun: g.started, block: g.release}
	}}
}

// schedEngine is an engine over gated sessions whose cost model stays
// fixed (fake runs take microseconds and would teach it nonsense).
func schedEngine(t *testing.T, cfg Config, g *gated) *Engine {
	t.Helper()
	if cfg.MaxBatchTokens == 0 {
		cfg.MaxBatchTokens = 4096
	}
	cfg.NoWarmup, cfg.ReloadBackoff, cfg.PadExact = true, time.Millisecond, true
	e := newTestEngine(t, cfg, g.factory())
	e.sched.mu.Lock()
	e.sched.learn = false
	e.sched.mu.Unlock()
	t.Cleanup(func() { close(g.release) }) // before Close: runs nothing blocks
	return e
}

// waitQueued polls until n texts are queued in the scheduler.
func waitQueued(t *testing.T, e *Engine, n int) {
	t.Helper()
	testkit.CheckFor(t, 10*time.Second, time.Millisecond, func() error {
		if q, _ := e.sched.busy(); q != n {
			return fmt.Errorf("%d texts queued, want %d", q, n)
		}
		return nil
	})
}

// embedAsync runs Embed in the background.
func embedAsync(e *Engine, ctx context.Context, texts []Text, call ...Call) <-chan []Embedding {
	out := make(chan []Embedding, 1)
	var c Call
	if len(call) > 0 {
		c = call[0]
	}
	go func() {
		embs, _, err := e.Embed(ctx, texts, c)
		if err != nil {
			embs = []Embedding{{Err: schema.Errorf(schema.CodeInternal, "%v", err)}}
		}
		out <- embs
	}()
	return out
}

// TestWorkConservation: a session that frees takes queued work at once,
// whichever call it belongs to; no session waits while texts are queued.
func TestWorkConservation(t *testing.T) {
	g := newGated()
	e := schedEngine(t, Config{Sessions: 2, MaxBatch: 1}, g)
	a := embedAsync(e, context.Background(), []Text{{Text: words(30, 0)}, {Text: words(20, 1)}, {Text: words(10, 2)}})
	<-g.started
	<-g.started // both sessions busy with the first call's texts
	waitQueued(t, e, 1)
	b := embedAsync(e, context.Background(), []Text{{Text: words(5, 3)}})
	waitQueued(t, e, 2)
	g.release <- struct{}{}
	<-g.started // the freed session took the next text without waiting for the other
	if _, running := e.sched.busy(); running != 2 {
		t.Fatalf("%d sessions running with work queued, want 2", running)
	}
	for range 3 {
		g.release <- struct{}{}
	}
	for _, ch := range []<-chan []Embedding{a, b} {
		for i, emb := range <-ch {
			if emb.Err != nil {
				t.Errorf("item %d: %v", i, emb.Err)
			}
		}
	}
}

// TestSharedChunk: texts of two concurrent calls run in one chunk and
// each call gets its own texts' vectors.
func TestSharedChunk(t *testing.T) {
	g := newGated()
	e := schedEngine(t, Config{Sessions: 1, MaxBatch: 8, Cost: pack.Cost{A: 1e-12}}, g)
	first := embedAsync(e, context.Background(), []Text{{Text: words(40, 9)}})
	<-g.started
	ta := []Text{{Text: words(6, 1), Outputs: Dense | Sparse | ColBERT}, {Text: words(6, 2), Outputs: Dense | Sparse | ColBERT}}
	tb := []Text{{Text: words(6, 3), Outputs: Dense | Sparse | ColBERT}}
	a := embedAsync(e, context.Background(), ta)
	waitQueued(t, e, 2)
	b := embedAsync(e, context.Background(), tb)
	waitQueued(t, e, 3)
	g.release <- struct{}{}
	in := <-g.started
	g.release <- struct{}{}
	if in.Batch != 3 {
		t.Errorf("second chunk has %d rows, want the three equal texts of both calls", in.Batch)
	}
	<-first
	for _, c := range []struct {
		texts []Text
		got   []Embedding
	}{{ta, <-a}, {tb, <-b}} {
		for i, txt := range c.texts {
			if err := sameEmbedding(c.got[i], want(t, txt.Text, 64)); err != nil {
				t.Errorf("text %q: %v", txt.Text, err)
			}
		}
	}
}

// TestPriorityAndAging: an interactive text goes ahead of queued bulk
// texts; bulk work that waited the aging time without progress goes
// ahead of interactive work.
func TestPriorityAndAging(t *testing.T) {
	g := newGated()
	e := schedEngine(t, Config{Sessions: 1, MaxBatch: 1, Aging: time.Hour}, g)
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	e.sched.mu.Lock()
	e.sched.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e.sched.mu.Unlock()
	bulkTexts := []Text{{Text: words(30, 0)}, {Text: words(29, 1)}, {Text: words(28, 2)}}
	b := embedAsync(e, context.Background(), bulkTexts)
	if in := <-g.started; in.Seq != 32 {
		t.Fatalf("first run seq %d, want the first bulk text (32)", in.Seq)
	}
	waitQueued(t, e, 2)
	i1 := embedAsync(e, context.Background(), []Text{{Text: words(3, 5)}}, Call{Class: Interactive})
	i2 := embedAsync(e, context.Background(), []Text{{Text: words(4, 6)}}, Call{Class: Interactive})
	waitQueued(t, e, 4)
	g.release <- struct{}{}
	if in := <-g.started; in.Seq != 5 && in.Seq != 6 {
		t.Fatalf("after the running bulk chunk came seq %d, want an interactive text (5 or 6)", in.Seq)
	}
	// The bulk texts now wait past the aging time without progress.
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	g.release <- struct{}{}
	if in := <-g.started; in.Seq != 31 {
		t.Fatalf("after aging came seq %d, want the next bulk text (31)", in.Seq)
	}
	g.release <- struct{}{}
	if in := <-g.started; in.Seq != 5 && in.Seq != 6 {
		t.Fatalf("after the aged bulk chunk came seq %d, want the other interactive text", in.Seq)
	}
	for range 2 {
		g.release <- struct{}{}
	}
	for _, ch := range []<-chan []Embedding{b, i1, i2} {
		for _, emb := range <-ch {
			if emb.Err != nil {
				t.Error(emb.Err)
			}
		}
	}
}

// TestPerCallCompletion: a call returns as soon as its own texts are
// embedded, while a larger call that arrived with it still has texts
// queued; calls are served in arrival order.
func TestPerCallCompletion(t *testing.T) {
	g := newGated()
	e := schedEngine(t, Config{Sessions: 1, MaxBatch: 1}, g)
	blocker := embedAsync(e, context.Background(), []Text{{Text: words(10, 0)}})
	<-g.started
	small := embedAsync(e, context.Background(), []Text{{Text: words(20, 1)}})
	waitQueued(t, e, 1)
	large := embedAsync(e, context.Background(), []Text{{Text: words(21, 2)}, {Text: words(22, 3)}, {Text: words(23, 4)}})
	waitQueued(t, e, 4)
	g.release <- struct{}{}
	<-blocker
	if in := <-g.started; in.Seq != 22 {
		t.Fatalf("second run seq %d, want the small call's text (22) that arrived first", in.Seq)
	}
	g.release <- struct{}{}
	select {
	case embs := <-small:
		if embs[0].Err != nil {
			t.Fatal(embs[0].Err)
		}
	case <-large:
		t.Fatal("the large call finished before the small one")
	}
	if q, _ := e.sched.busy(); q < 2 {
		t.Errorf("%d texts of the large call still queued when the small call returned, want >= 2", q)
	}
	for range 3 {
		g.release <- struct{}{}
	}
	<-large
}

// TestLatencyCap: bulk chunks stay within the modelled run time cap;
// interactive chunks are not held to it.
func TestLatencyCap(t *testing.T) {
	g := newGated()
	// 10 µs a token and 200 µs a run: a row of 8 tokens costs 80 µs,
	// batching pays, and the 500 µs cap holds 3 rows.
	e := schedEngine(t, Config{Sessions: 1, MaxBatch: 16, Cost: pack.Cost{A: 1e-5}, MaxChunkLatency: 500 * time.Microsecond}, g)
	texts := make([]Text, 7)
	for i := range texts {
		texts[i] = Text{Text: words(6, i)}
	}
	for range 8 {
		g.release <- struct{}{}
	}
	_, rep, err := e.Embed(context.Background(), texts, Call{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.Chunks {
		if c.Batch > 3 {
			t.Errorf("bulk chunk %dx%d: modelled %.0f µs above the 500 µs cap", c.Batch, c.Seq, e.sched.seconds(c.Batch, c.Seq)*1e6)
		}
	}
	_, rep, err = e.Embed(context.Background(), texts, Call{Class: Interactive})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Chunks) != 1 || rep.Chunks[0].Batch != 7 {
		t.Errorf("interactive chunks %+v, want one chunk of 7", rep.Chunks)
	}
}

// TestCostPerToken: where a run's fixed cost is small, a long text runs
// alone rather than padding short texts up to it.
func TestCostPerToken(t *testing.T) {
	g := newGated()
	e := schedEngine(t, Config{Sessions: 1, MaxBatch: 16, Cost: pack.Cost{A: 1e-6}, PadExact: true}, g)
	for range 8 {
		g.release <- struct{}{}
	}
	_, rep, err := e.Embed(context.Background(), []Text{{Text: words(60, 0)}, {Text: words(5, 1)}, {Text: words(5, 2)}, {Text: words(5, 3)}}, Call{})
	if err != nil {
		t.Fatal(err)
	}
	shapes := map[Shape]bool{}
	for _, c := range rep.Chunks {
		shapes[Shape{c.Batch, c.Seq}] = true
	}
	if len(rep.Chunks) != 2 || !shapes[Shape{1, 62}] || !shapes[Shape{3, 7}] {
		t.Errorf("chunks %+v, want 1x62 and 3x7 (padded to their own longest text)", rep.Chunks)
	}
}

// TestMemoryBudget: no chunk's modelled workspace exceeds the budget; a
// text that cannot fit alone is cut when truncation is on and fails
// text_too_long otherwise; warm-up shapes over the budget are refused.
func TestMemoryBudget(t *testing.T) {
	cost := newCostModel(fakeModel(64).Config)
	budget := int64(cost.bytes(1, 40)) + 1 // one text of 40 tokens, two of 28
	g := newGated()
	e := schedEngine(t, Config{Sessions: 1, MaxBatch: 16, Cost: pack.Cost{A: 1e-12}, MemoryBudget: budget, PadExact: true}, g)
	if e.MaxTokens() != 40 {
		t.Fatalf("max tokens %d under the budget, want 40", e.MaxTokens())
	}
	for range 16 {
		g.release <- struct{}{}
	}
	long := words(50, 0)
	embs, rep, err := e.Embed(context.Background(), []Text{
		{Text: long, Truncate: true}, {Text: long}, {Text: words(25, 1)}, {Text: words(25, 2)}, {Text: words(25, 3)},
	}, Call{})
	if err != nil {
		t.Fatal(err)
	}
	if !embs[0].Truncated || embs[0].Tokens != 52 || embs[0].Err != nil {
		t.Errorf("long text with truncate: %+v, want cut to fit", embs[0])
	}
	if embs[1].Err == nil || embs[1].Err.Code != schema.CodeTextTooLong {
		t.Errorf("long text without truncate: err %v, want text_too_long", embs[1].Err)
	}
	for _, c := range rep.Chunks {
		if b := e.sched.cost.bytes(c.Batch, c.Seq); b > float64(budget) {
			t.Errorf("chunk %dx%d models %.0f bytes, above the budget %d", c.Batch, c.Seq, b, budget)
		}
	}
	if err := e.WarmShape(context.Background(), 4, 40); !errors.Is(err, ErrShape) {
		t.Errorf("warming 4x40 over the budget: %v, want ErrShape", err)
	}
	_, err = New(context.Background(), Config{NoWarmup: true, MemoryBudget: budget, Warmup: []Shape{{4, 40}}}, fakeTok{}, fakeModel(64), (&factory{}).new)
	if !errors.Is(err, ErrConfig) {
		t.Errorf("New with a warm-up shape over the budget: %v, want ErrConfig", err)
	}
}

// TestCostModelLearns: the run-time model refits from measured runs.
func TestCostModelLearns(t *testing.T) {
	m := newCostModel(fakeModel(64).Config)
	truth := func(b, s int) float64 { return 1e-3 + 2e-6*float64(b*s) + 1e-9*float64(b*s*s) }
	for i := range 400 {
		b, s := 1+i%8, 16<<(i%6)
		m.observe(b, s, truth(b, s))
	}
	for _, sh := range []Shape{{1, 16}, {8, 128}, {1, 512}} {
		got, want := m.seconds(sh.Batch, sh.Seq), truth(sh.Batch, sh.Seq)
		if got < want*0.9 || got > want*1.1 {
			t.Errorf("%v: modelled %.3g s, want %.3g s", sh, got, want)
		}
	}
}
