package bench

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/ort"
)

// tinyConfig runs the suite on the committed tiny model, small enough for a
// unit test; it skips without ONNX Runtime.
func tinyConfig(t *testing.T) Config {
	t.Helper()
	lib := os.Getenv("JETEMBED_ORT_LIB")
	if lib == "" {
		t.Skip("JETEMBED_ORT_LIB not set; run `make test` or `make deps`")
	}
	if _, err := ort.Init(ort.LibraryOptions{Path: lib}); errors.Is(err, ort.ErrNoCgo) {
		t.Skip(err)
	}
	return Config{ModelDir: filepath.Join("..", "..", "..", "testdata", "models", "tiny-hidden"), ORTLib: lib,
		Sessions: 1, Threads: 1, Texts: 120, Requests: 10}.WithDefaults()
}

// TestNaiveMatchesEngine checks that the naive baseline computes what the
// engine computes (the BGE-M3 dense vector), so that the comparison is
// between two ways of doing the same work.
func TestNaiveMatchesEngine(t *testing.T) {
	cfg := tinyConfig(t)
	s, err := openStack(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e, err := s.openEngine(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	pool, err := s.openRunners()
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	texts := Corpus(20, 5)
	in := make([]engine.Text, len(texts))
	for i, x := range texts {
		in[i] = engine.Text{Text: x, Outputs: engine.Dense, Truncate: true}
	}
	want, _, err := e.Embed(ctx, in, engine.Call{})
	if err != nil {
		t.Fatal(err)
	}
	naive := &naiveEmbedder{s: s, pool: pool}
	got, rep, err := naive.Embed(ctx, in, engine.Call{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.PaddedTokens < rep.Tokens || rep.Tokens == 0 {
		t.Errorf("report %+v", rep)
	}
	for i := range in {
		if got[i].Tokens != want[i].Tokens || len(got[i].Dense) != len(want[i].Dense) {
			t.Fatalf("text %d: %d tokens, %d dims; engine %d tokens, %d dims", i, got[i].Tokens, len(got[i].Dense), want[i].Tokens, len(want[i].Dense))
		}
		for k := range got[i].Dense {
			if d := math.Abs(float64(got[i].Dense[k] - want[i].Dense[k])); d > 1e-4 {
				t.Fatalf("text %d dim %d: naive %v, engine %v", i, k, got[i].Dense[k], want[i].Dense[k])
			}
		}
	}
}

// TestRunTiny runs the whole suite (without the peer) on the tiny model and
// checks that every measurement happened and the table names every goal.
func TestRunTiny(t *testing.T) {
	cfg := tinyConfig(t)
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for name, rate := range map[string]Rate{"engine": r.Engine, "pipeline": r.Pipeline.Rate, "naive": r.Naive.Rate,
		"arrival": r.Arrival, "noop": r.Noop.Rate, "noop engine": r.NoopEngine} {
		if rate.Texts%cfg.Texts != 0 || rate.PerSecond() <= 0 {
			t.Errorf("%s: %d texts at %.1f/s", name, rate.Texts, rate.PerSecond())
		}
		if rate.Padded < rate.Tokens || rate.Tokens == 0 {
			t.Errorf("%s: %d real of %d padded tokens", name, rate.Tokens, rate.Padded)
		}
	}
	// The packer must pad less than fixed arrival-order batches.
	if r.Engine.Fill() <= r.Arrival.Fill() {
		t.Errorf("packer fill %.3f, arrival-order fill %.3f", r.Engine.Fill(), r.Arrival.Fill())
	}
	for _, l := range []Latency{r.Idle, r.Loaded} {
		if l.Requests != cfg.Requests || l.P50 <= 0 || l.P99 < l.P50 || l.Engine <= 0 {
			t.Errorf("latency %+v", l)
		}
	}
	if r.Loaded.LoadTexts <= 0 {
		t.Errorf("no load during the loaded latency run: %+v", r.Loaded)
	}
	if g := r.Gateway; g.Calls != cfg.Requests || g.HTTPP50 <= 0 || g.BareP50 <= 0 || g.HTTPRate <= 0 || g.BareRate <= 0 || g.Failed != 0 {
		t.Errorf("gateway %+v", g)
	}
	if r.Pipeline.PeakRSS == 0 || r.Pipeline.BaseRSS == 0 {
		t.Errorf("peak RSS %d, base %d", r.Pipeline.PeakRSS, r.Pipeline.BaseRSS)
	}
	if x := r.Reindex; x == nil || x.First.Ran != cfg.Texts || x.Again.Ran != 0 || x.Again.Cached != cfg.Texts || x.Repeats.Distinct != cfg.Texts-x.Repeated {
		t.Errorf("re-index: %+v", x)
	}
	if len(r.Fair) != 3 {
		t.Errorf("fairness modes: %+v", r.Fair)
	}
	for _, f := range r.Fair {
		if f.Backlog == 0 || f.Drain <= 0 || f.BacklogTokens == 0 || len(f.Idle) != fairIdleJobs || len(f.Under) == 0 {
			t.Errorf("fairness, %s: %+v", f.Mode, f)
		}
	}
	if w := r.Weighted; w.Window == 0 || w.Results[0] == 0 || w.Results[1] == 0 || w.Tokens[0] == 0 || w.Tokens[1] == 0 {
		t.Errorf("weights: %+v", w)
	}
	var b bytes.Buffer
	if err := r.Markdown(&b); err != nil {
		t.Fatal(err)
	}
	if p := r.Precision; p == nil || !p.Plan.Int8 || p.Int8.Texts != p.FP32.Texts || p.Int8.PerSecond() <= 0 || p.FP32CPU <= 0 || p.Int8CPU <= 0 {
		t.Errorf("int8 vs fp32: %+v (%v)", p, r.PrecisionErr)
	}
	for _, want := range []string{"Pipeline efficiency", "Loop overhead", "naive baseline", "Packing", "added latency", "HTTP gateway / bare request-reply", "Peak RSS", "Bare engine int8 / fp32", "Re-index: the same", "Re-index: texts the model ran", "Repeats: ", "Tenant B's job under tenant A's backlog", "drained", "Weights A=3, B=1"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	t.Log("\n" + b.String())
}

func TestHFLayout(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join("..", "..", "..", "testdata", "models", "tiny-hidden")
	hf := filepath.Join(dir, "m")
	if err := hfLayout(hf, model, filepath.Join(model, "model.onnx"), filepath.Join(model, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "tokenizer.json", "tokenizer_config.json", "onnx/model.onnx"} {
		a, err := os.ReadFile(filepath.Join(hf, f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "tokenizer_config.json" {
			if !strings.Contains(string(a), `"pad_token":"<pad>"`) {
				t.Errorf("tokenizer_config.json: %s", a)
			}
			continue
		}
		b, err := os.ReadFile(filepath.Join(model, filepath.Base(f)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s is not the model's file", f)
		}
	}
	// A second call replaces the links instead of failing.
	if err := hfLayout(hf, model, filepath.Join(model, "model.onnx"), filepath.Join(model, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
}

// TestPrecisionBench is the int8 against fp32 part of the suite alone, on
// the model JETEMBED_BENCH_MODEL names (`jetembed genmodel --size small
// --layout hidden`), with BENCH_SESSIONS x BENCH_THREADS: the figures of
// BENCHMARKS.md's int8 section, without the rest of make bench.
func TestPrecisionBench(t *testing.T) {
	dir := os.Getenv("JETEMBED_BENCH_MODEL")
	if dir == "" {
		t.Skip("JETEMBED_BENCH_MODEL is not set")
	}
	cfg := tinyConfig(t)
	cfg.ModelDir, cfg.Texts, cfg.Sessions, cfg.Threads = dir, 250, envInt("BENCH_SESSIONS", 2), envInt("BENCH_THREADS", 1)
	p, err := RunPrecision(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	p.Markdown(&b)
	t.Log("\n" + b.String())
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}
