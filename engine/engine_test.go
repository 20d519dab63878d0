package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetembed/jetembed/engine/internal/heads"
	"github.com/jetembed/jetembed/schema"
)

// testConfig has small budgets so a handful of texts makes several chunks.
func testConfig() Config {
	return Config{
		MaxBatchTokens: 64,
		MaxBatch:       4,
		Tiers:          []int{8, 16, 32, 64},
		NoWarmup:       true,
		ReloadBackoff:  time.Millisecond,
	}
}

func newTestEngine(t *testing.T, cfg Config, f *factory) *Engine {
	t.Helper()
	if f == nil {
		f = &factory{}
	}
	e, err := New(context.Background(), cfg, fakeTok{}, fakeModel(64), f.new)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// words makes a text of n words whose first letters vary with seed.
func words(n, seed int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = string(rune('a'+(seed+i)%26)) + strings.Repeat("x", (seed+i)%3)
	}
	return strings.Join(w, " ")
}

// want is what fakeRunner and the heads make of a text.
func want(t *testing.T, text string, max int) Embedding {
	t.Helper()
	ids, count := fakeTok{}.Encode(text, max)
	var e Embedding
	var sum float32
	for _, id := range ids {
		sum += float32(id)
	}
	e.Dense = heads.Dense(nil, []float32{sum, float32(len(ids))})
	for _, id := range ids {
		if id > 3 && !slices.Contains(e.SparseIDs, uint32(id)) {
			e.SparseIDs = append(e.SparseIDs, uint32(id))
		}
	}
	slices.Sort(e.SparseIDs)
	for _, id := range e.SparseIDs {
		e.SparseWeights = append(e.SparseWeights, float32(id)/1000)
	}
	for _, id := range ids[1:] {
		e.ColBERT = heads.Dense(e.ColBERT, []float32{float32(id), 1})
	}
	e.ColBERTDim = 2
	e.Tokens, e.Truncated = count, count > max
	return e
}

func sameEmbedding(got, want Embedding) error {
	eq := func(a, b []float32) bool {
		return len(a) == len(b) && !slices.ContainsFunc(a, func(x float32) bool { return math.IsNaN(float64(x)) }) &&
			func() bool {
				for i := range a {
					if math.Abs(float64(a[i]-b[i])) > 1e-6 {
						return false
					}
				}
				return true
			}()
	}
	switch {
	case got.Err != nil:
		return got.Err
	case !eq(got.Dense, want.Dense):
		return fmt.Errorf("dense %v, want %v", got.Dense, want.Dense)
	case !slices.Equal(got.SparseIDs, want.SparseIDs) || !eq(got.SparseWeights, want.SparseWeights):
		return fmt.Errorf("sparse %v %v, want %v %v", got.SparseIDs, got.SparseWeights, want.SparseIDs, want.SparseWeights)
	case !eq(got.ColBERT, want.ColBERT) || got.ColBERTDim != want.ColBERTDim:
		return fmt.Errorf("colbert %v, want %v", got.ColBERT, want.ColBERT)
	case got.Tokens != want.Tokens || got.Truncated != want.Truncated:
		return fmt.Errorf("tokens %d truncated %v, want %d %v", got.Tokens, got.Truncated, want.Tokens, want.Truncated)
	}
	return nil
}

// TestEmbedOrderAndPacking sends texts of many lengths, as several jobs
// with different outputs would, and checks every result belongs to its
// own text (in input order) although the texts were packed across jobs.
func TestEmbedOrderAndPacking(t *testing.T) {
	e := newTestEngine(t, Config{Sessions: 2, MaxBatchTokens: 64, MaxBatch: 4, Tiers: []int{8, 16, 32, 64}, NoWarmup: true}, nil)
	var texts []Text
	for i := 0; i < 23; i++ {
		texts = append(texts, Text{Text: words(1+(i*7)%40, i), Outputs: Dense | Sparse | ColBERT, Truncate: true})
	}
	texts[3].Text = words(80, 3) // truncated to 64
	embs, rep, err := e.Embed(context.Background(), texts, Call{})
	if err != nil {
		t.Fatal(err)
	}
	if len(embs) != len(texts) {
		t.Fatalf("%d embeddings for %d texts", len(embs), len(texts))
	}
	for i, tx := range texts {
		if err := sameEmbedding(embs[i], want(t, tx.Text, 64)); err != nil {
			t.Errorf("text %d: %v", i, err)
		}
	}
	if !embs[3].Truncated || embs[3].Tokens != 82 {
		t.Errorf("text 3: truncated %v tokens %d, want true 82", embs[3].Truncated, embs[3].Tokens)
	}
	seen := map[int]bool{}
	real, padded := 0, 0
	for _, c := range rep.Chunks {
		if c.Session < 0 || c.Session > 1 || c.Batch != len(c.Items) || c.PaddedTokens != c.Batch*c.Seq {
			t.Errorf("bad chunk report %+v", c)
		}
		for _, it := range c.Items {
			seen[it] = true
			if n := len(embs[it].ColBERT)/2 + 1; n > c.Seq {
				t.Errorf("item %d has %d tokens in a chunk of seq %d", it, n, c.Seq)
			}
		}
		real += c.RealTokens
		padded += c.PaddedTokens
	}
	if len(seen) != len(texts) || len(rep.Chunks) >= len(texts) {
		t.Errorf("%d chunks cover %d of %d texts; want fewer chunks than texts, all covered", len(rep.Chunks), len(seen), len(texts))
	}
	if rep.Tokens != real || rep.PaddedTokens != padded {
		t.Errorf("report totals %d/%d, chunks sum to %d/%d", rep.Tokens, rep.PaddedTokens, real, padded)
	}
}

func TestEmbedOutputsSubset(t *testing.T) {
	e := newTestEngine(t, testConfig(), nil)
	embs, _, err := e.Embed(context.Background(), []Text{
		{Text: "a b", Outputs: Sparse, Truncate: true},
		{Text: "c d"}, // no outputs: dense, the wire default
	}, Call{})
	if err != nil {
		t.Fatal(err)
	}
	if embs[0].Dense != nil || embs[0].ColBERT != nil || embs[0].SparseIDs == nil {
		t.Errorf("sparse only: got %+v", embs[0])
	}
	if embs[1].Dense == nil || embs[1].SparseIDs != nil || embs[1].ColBERT != nil {
		t.Errorf("default outputs: got %+v", embs[1])
	}
}

func TestEmbedItemErrors(t *testing.T) {
	e := newTestEngine(t, testConfig(), nil)
	texts := []Text{
		{Text: "fine", Outputs: Dense},
		{Text: "bad \xff utf8", Outputs: Dense, Truncate: true},
		{Text: words(70, 1), Outputs: Dense, Truncate: false},
		{Text: words(70, 1), Outputs: Dense, Truncate: true},
	}
	embs, _, err := e.Embed(context.Background(), texts, Call{})
	if err != nil {
		t.Fatal(err)
	}
	codes := []schema.Code{"", schema.CodeInvalidUTF8, schema.CodeTextTooLong, ""}
	for i, c := range codes {
		var got schema.Code
		if embs[i].Err != nil {
			got = embs[i].Err.Code
		}
		if got != c {
			t.Errorf("text %d: error %v, want code %q", i, embs[i].Err, c)
		}
	}
	if embs[2].Tokens != 72 || embs[2].Dense != nil {
		t.Errorf("too long text: tokens %d dense %v, want 72 and no vector", embs[2].Tokens, embs[2].Dense)
	}
	if embs[3].Dense == nil || !embs[3].Truncated {
		t.Errorf("truncated text: %+v", embs[3])
	}
}

func TestGuard(t *testing.T) {
	cfg := testConfig()
	cfg.Guard, cfg.GuardSeq = true, 32
	cfg.NoWarmup, cfg.Warmup = false, []Shape{{1, 8}, {1, 16}}
	f := &factory{}
	e := newTestEngine(t, cfg, f)
	if c := e.Coverage().Ceiling(); c != 16 {
		t.Fatalf("ceiling after warm-up %d, want 16", c)
	}
	texts := []Text{
		{Text: words(3, 0), Outputs: Dense},  // seq 8
		{Text: words(25, 0), Outputs: Dense}, // seq 32: refused
		{Text: words(20, 0), Outputs: Dense}, // seq 32: refused (same chunk)
		{Text: words(12, 0), Outputs: Dense}, // seq 16: below guard seq
	}
	embs, _, err := e.Embed(context.Background(), texts, Call{})
	if err != nil {
		t.Fatal(err)
	}
	for i, refused := range []bool{false, true, true, false} {
		switch {
		case refused && (embs[i].Err == nil || embs[i].Err.Code != schema.CodeShapeNotWarmed || !embs[i].Err.Retriable):
			t.Errorf("text %d: err %v, want retriable shape_not_warmed", i, embs[i].Err)
		case !refused && embs[i].Err != nil:
			t.Errorf("text %d: %v", i, embs[i].Err)
		}
	}
	for _, s := range e.Stats().Sessions {
		if s.Errors != 0 || s.ConsecutiveErrors != 0 {
			t.Errorf("guard refusals counted as run errors: %+v", s)
		}
	}
	// The fleet raises the ceiling: the same texts now run.
	e.Coverage().Raise(2, 32)
	embs, _, _ = e.Embed(context.Background(), texts, Call{})
	for i := range embs {
		if embs[i].Err != nil {
			t.Errorf("after raise, text %d: %v", i, embs[i].Err)
		}
	}
}

func TestWarmupAndOnWarmed(t *testing.T) {
	var warmed []Shape
	cfg := testConfig()
	cfg.Sessions = 2
	cfg.NoWarmup, cfg.Warmup = false, []Shape{{1, 8}, {2, 16}}
	cfg.OnWarmed = func(s Shape) { warmed = append(warmed, s) } // called from sessions one at a time during warm-up
	var runs atomic.Int32
	in := make(chan RunInput, 16)
	f := &factory{mk: func(int) *fakeRunner { return &fakeRunner{inRun: in} }}
	e := newTestEngine(t, cfg, f)
	close(in)
	for range in {
		runs.Add(1)
	}
	if runs.Load() != 4 {
		t.Errorf("warm-up ran %d chunks, want 2 shapes x 2 sessions", runs.Load())
	}
	if !slices.Equal(warmed, []Shape{{1, 8}, {2, 16}}) {
		t.Errorf("OnWarmed saw %v, want each shape once", warmed)
	}
	ss := e.Stats()
	if !slices.Equal(ss.Warmed, warmed) || ss.Ceiling != 16 {
		t.Errorf("stats warmed %v ceiling %d", ss.Warmed, ss.Ceiling)
	}
	for _, s := range ss.Sessions {
		if s.Runs != 2 || s.Busy <= 0 {
			t.Errorf("session %d: %d runs busy %v, want 2 runs", s.Index, s.Runs, s.Busy)
		}
	}
}

// TestLeastLoaded blocks session runs and checks that chunks spread over
// both sessions instead of queueing on one.
func TestLeastLoaded(t *testing.T) {
	block := make(chan struct{})
	in := make(chan RunInput, 8)
	f := &factory{mk: func(int) *fakeRunner { return &fakeRunner{block: block, inRun: in} }}
	cfg := testConfig()
	cfg.Sessions = 2
	e := newTestEngine(t, cfg, f)
	done := make(chan CallReport, 1)
	go func() {
		// Two chunks of seq 64 (one row each: 64 tokens is the budget).
		_, rep, _ := e.Embed(context.Background(), []Text{{Text: words(60, 0)}, {Text: words(61, 1)}}, Call{})
		done <- rep
	}()
	<-in
	<-in // both running at once: they are on different sessions
	close(block)
	rep := <-done
	if len(rep.Chunks) != 2 || rep.Chunks[0].Session == rep.Chunks[1].Session {
		t.Errorf("chunks %+v, want two chunks on two sessions", rep.Chunks)
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []Config{
		{Sessions: -1},
		{MaxBatchTokens: 10},
		{MaxBatch: -1},
		{AdmissionTokens: 5},
		{BreakerThreshold: -1},
		{Tiers: []int{16, 8}},
		{Warmup: []Shape{{1, 128}}},
		{MemoryBudget: -1},
		{InteractiveTokens: 5},
	}
	for i, c := range bad {
		if err := c.WithDefaults(64).validate(); !errors.Is(err, ErrConfig) && !strings.Contains(fmt.Sprint(err), "invalid config") {
			t.Errorf("config %d %+v: err %v, want invalid config", i, c, err)
		}
	}
	c := Config{}.WithDefaults(8192)
	if err := c.validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if c.MaxTokens != 8192 || c.GuardSeq != 4096 || c.Guard || c.Tiers[len(c.Tiers)-1] != 8192 {
		t.Errorf("defaults %+v", c)
	}
	// The default grid is batch 1 and 2 at every tier the packer pads to.
	var want []Shape
	for _, seq := range c.Tiers {
		want = append(want, Shape{1, seq}, Shape{2, seq})
	}
	if !slices.Equal(c.Warmup, want) || len(c.Tiers) < 30 {
		t.Errorf("default warm-up %v, want 1 and 2 x every tier %v", c.Warmup, c.Tiers)
	}
	c = Config{Tiers: []int{8, 64, 512, 8192}, MaxTokens: 512, WarmupBatches: []int{4}}.WithDefaults(8192)
	if want := []Shape{{4, 8}, {4, 64}, {4, 512}}; !slices.Equal(c.Warmup, want) {
		t.Errorf("warm-up %v, want %v (configured tiers up to max tokens, at the given batch)", c.Warmup, want)
	}
	if _, err := New(context.Background(), Config{Sessions: 1, NoWarmup: true}, fakeTok{}, fakeModel(64),
		(&factory{loadErr: func(int) error { return errBoom }}).new); !errors.Is(err, ErrUnavailable) || !errors.Is(err, errBoom) {
		t.Errorf("New with failing factory: %v, want ErrUnavailable wrapping the load error", err)
	}
}

func TestCanaryAndClose(t *testing.T) {
	e := newTestEngine(t, testConfig(), nil)
	if err := e.Canary(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.Close()
	if err := e.Health(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("health after close: %v", err)
	}
	embs, _, _ := e.Embed(context.Background(), []Text{{Text: "x"}}, Call{})
	if embs[0].Err == nil || embs[0].Err.Code != schema.CodeEngineUnavailable {
		t.Errorf("embed after close: %v", embs[0].Err)
	}
}

func TestDefaultWarmupGridRespectsMaxSeq(t *testing.T) {
	for _, tc := range []struct {
		maxSeq, wantLongest int
	}{{0, 8192}, {512, 512}, {600, 512}, {100000, 8192}} {
		cfg := Config{WarmupMaxSeq: tc.maxSeq}.WithDefaults(8192)
		longest := 0
		for _, s := range cfg.Warmup {
			longest = max(longest, s.Seq)
		}
		if longest != tc.wantLongest {
			t.Errorf("WarmupMaxSeq %d: longest warm-up seq %d, want %d", tc.maxSeq, longest, tc.wantLongest)
		}
	}
}
