package engine_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/jetembed/jetembed/engine/internal/pack"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/model"
	"github.com/jetembed/jetembed/engine/ort"
)

// These tests run the real parts: ONNX Runtime sessions of the committed
// tiny models (engine/ort) opened by engine/model, through the engine.

func initORT(tb testing.TB) {
	tb.Helper()
	p := os.Getenv("JETEMBED_ORT_LIB")
	if p == "" {
		tb.Skip("JETEMBED_ORT_LIB not set; run `make test` or `make deps`")
	}
	if _, err := ort.Init(ort.LibraryOptions{Path: p}); errors.Is(err, ort.ErrNoCgo) {
		tb.Skip(err)
	} else if err != nil {
		tb.Fatal(err)
	}
}

func openModel(tb testing.TB, name string) *model.Model {
	tb.Helper()
	m, err := model.Open(filepath.Join("..", "testdata", "models", name), model.DefaultOptions())
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// wordTok maps each word to a stable id in the tiny vocabulary: the
// engine's results must not depend on which tokenizer made the ids.
var wordTok = engine.TokenizerFunc(func(text string, maxTokens int) ([]int32, int) {
	ids := []int32{0}
	for _, w := range strings.Fields(text) {
		h := fnv.New32a()
		h.Write([]byte(w))
		ids = append(ids, 4+int32(h.Sum32()%7998))
	}
	ids = append(ids, 2)
	n := len(ids)
	if n > maxTokens {
		ids = append(ids[:maxTokens-1], 2)
	}
	return ids, n
})

func openEngine(tb testing.TB, m *model.Model, cfg engine.Config) *engine.Engine {
	tb.Helper()
	e, err := engine.New(context.Background(), cfg, wordTok, m, func(int) (engine.Runner, error) {
		return ort.Open(m, ort.Provider{IntraOpThreads: 1})
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close() })
	return e
}

func sentence(n, seed int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = fmt.Sprintf("w%d", (seed*31+i*7)%500)
	}
	return strings.Join(w, " ")
}

func maxDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// compare reports the largest difference between two embeddings, or an
// error when their structure (sparse ids, sizes) differs.
func compare(a, b engine.Embedding) (float64, error) {
	if a.Err != nil || b.Err != nil {
		return 0, fmt.Errorf("errors %v / %v", a.Err, b.Err)
	}
	if !slices.Equal(a.SparseIDs, b.SparseIDs) {
		return 0, fmt.Errorf("sparse ids %v vs %v", a.SparseIDs, b.SparseIDs)
	}
	if len(a.Dense) == 0 || len(a.ColBERT) == 0 || a.ColBERTDim != b.ColBERTDim {
		return 0, fmt.Errorf("missing outputs: dense %d colbert %d", len(a.Dense), len(a.ColBERT))
	}
	return max(maxDiff(a.Dense, b.Dense), maxDiff(a.SparseWeights, b.SparseWeights), maxDiff(a.ColBERT, b.ColBERT)), nil
}

const all = engine.Dense | engine.Sparse | engine.ColBERT

// TestPaddingInvariance embeds short texts alone (padded to their own
// tier) and packed with long texts into one 256-wide chunk: each short
// text's vectors must not change, in both export layouts.
func TestPaddingInvariance(t *testing.T) {
	initORT(t)
	for _, name := range []string{"tiny-hidden", "tiny-heads"} {
		t.Run(name, func(t *testing.T) {
			m := openModel(t, name)
			alone := openEngine(t, m, engine.Config{NoWarmup: true})
			// A per-run cost that dwarfs the per-token one makes batching pay.
			packed := openEngine(t, m, engine.Config{NoWarmup: true, Tiers: []int{256}, MaxBatch: 8, Cost: pack.Cost{A: 1e-12}})
			short := []engine.Text{{Text: sentence(3, 1), Outputs: all}, {Text: sentence(17, 2), Outputs: all}}
			mixed := []engine.Text{{Text: sentence(250, 3), Outputs: all}, short[0], {Text: sentence(120, 4), Outputs: all}, short[1]}
			want, _, err := alone.Embed(context.Background(), short, engine.Call{})
			if err != nil {
				t.Fatal(err)
			}
			got, rep, err := packed.Embed(context.Background(), mixed, engine.Call{})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Chunks) != 1 || rep.Chunks[0].Seq != 256 {
				t.Fatalf("packed into %+v, want one chunk of seq 256", rep.Chunks)
			}
			for i, j := range []int{1, 3} {
				d, err := compare(want[i], got[j])
				if err != nil {
					t.Fatalf("text %d: %v", i, err)
				}
				if d > 1e-5 {
					t.Errorf("text %d: alone vs packed differ by %g", i, d)
				}
				if n := len(got[j].ColBERT) / got[j].ColBERTDim; n != got[j].Tokens-1 {
					t.Errorf("text %d: %d colbert rows for %d tokens", i, n, got[j].Tokens)
				}
			}
		})
	}
}

// TestHiddenMatchesHeads embeds the same texts with the hidden-state
// export (heads in Go) and the three-head export of the same weights.
func TestHiddenMatchesHeads(t *testing.T) {
	initORT(t)
	hidden := openEngine(t, openModel(t, "tiny-hidden"), engine.Config{NoWarmup: true})
	heads := openEngine(t, openModel(t, "tiny-heads"), engine.Config{NoWarmup: true})
	var texts []engine.Text
	for i := 0; i < 12; i++ {
		texts = append(texts, engine.Text{Text: sentence(1+i*13, i), Outputs: all})
	}
	a, _, err := hidden.Embed(context.Background(), texts, engine.Call{})
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := heads.Embed(context.Background(), texts, engine.Call{})
	if err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for i := range texts {
		d, err := compare(a[i], b[i])
		if err != nil {
			t.Fatalf("text %d: %v", i, err)
		}
		worst = max(worst, d)
	}
	t.Logf("largest difference hidden+Go heads vs three-head graph: %g", worst)
	if worst > 1e-5 {
		t.Errorf("hidden and heads layouts differ by %g", worst)
	}
}

// TestRealWarmupAndProbe runs the default warm-up grid and the cost probe
// on the tiny model, and checks the guard against the ceiling they leave.
func TestRealWarmupAndProbe(t *testing.T) {
	initORT(t)
	var warmed []engine.Shape
	e := openEngine(t, openModel(t, "tiny-heads"), engine.Config{
		MaxTokens: 2048, Probe: true, Guard: true, GuardSeq: 256,
		Warmup:   []engine.Shape{{Batch: 1, Seq: 64}, {Batch: 2, Seq: 128}},
		OnWarmed: func(s engine.Shape) { warmed = append(warmed, s) },
	})
	st := e.Stats()
	// The probe stays below the guard: 32 and 128 run, 512 is not tried.
	if st.Ceiling != 128 || len(warmed) < 2 || warmed[0] != (engine.Shape{Batch: 1, Seq: 64}) {
		t.Errorf("ceiling %d, warmed %v", st.Ceiling, warmed)
	}
	if st.Cost.A <= 0 && st.Cost.Bq <= 0 {
		t.Errorf("probe fitted no cost model: %+v", st.Cost)
	}
	t.Logf("probe cost model: %.3g s/token + %.3g s/token/seq; ceiling %d", st.Cost.A, st.Cost.Bq, st.Ceiling)
	if err := e.Canary(context.Background()); err != nil {
		t.Fatal(err)
	}
}
