package bench

import (
	"context"
	"io"
	"os"
	"runtime/pprof"
	"testing"

	"github.com/jetembed/jetembed/consumer"
)

// TestNoopRatio times the no-op rows of the suite alone, in turns (the
// bare no-op engine, then the same engine through NATS) and logs their
// rates and ratio: the figure the loop overhead is read from. It asserts
// nothing about speed (the machine is shared). It runs with
// JETEMBED_BENCH_NOOP=1; JETEMBED_BENCH_NOOP_MODEL names another model
// directory (the bench's small model), JETEMBED_BENCH_NOOP_PROFILE a file
// for a CPU profile of the NATS runs only.
func TestNoopRatio(t *testing.T) {
	if os.Getenv("JETEMBED_BENCH_NOOP") == "" {
		t.Skip("JETEMBED_BENCH_NOOP not set")
	}
	cfg := tinyConfig(t)
	cfg.Texts, cfg.Log, cfg.Sessions = 250, io.Discard, 2
	if dir := os.Getenv("JETEMBED_BENCH_NOOP_MODEL"); dir != "" {
		cfg.ModelDir = dir
	}
	cfg = cfg.WithDefaults()
	s, err := openStack(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e, err := s.openEngine(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cost := e.Stats().Cost
	e.Close()
	noop, err := s.openNoop(ctx, cost)
	if err != nil {
		t.Fatal(err)
	}
	defer noop.Close()
	corpus := Corpus(cfg.Texts, cfg.Seed)
	var jobs [][]string
	for range max(1, noopTexts/len(corpus)) {
		jobs = append(jobs, Jobs(corpus, cfg.Seed)...)
	}
	cc := consumer.Config{} // the engine admits by its default budgets
	if p := os.Getenv("JETEMBED_BENCH_NOOP_PROFILE"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
		pprof.StartCPUProfile(f)
		pprof.StopCPUProfile()
	}
	var sumBare, sumNATS, bestBare, bestNATS float64
	for round := range 3 {
		bare, err := bareEngine(ctx, noop, jobs, len(jobs))
		if err != nil {
			t.Fatal(err)
		}
		if p := os.Getenv("JETEMBED_BENCH_NOOP_PROFILE"); p != "" && round == 0 {
			f, _ := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
			pprof.StartCPUProfile(f)
		}
		nats, err := bulkRun(ctx, noop, cc, jobs)
		if round == 0 {
			pprof.StopCPUProfile()
		}
		if err != nil {
			t.Fatal(err)
		}
		sumBare += bare.PerSecond()
		sumNATS += nats.PerSecond()
		bestBare, bestNATS = max(bestBare, bare.PerSecond()), max(bestNATS, nats.PerSecond())
		t.Logf("round %d: bare %.0f texts/s, NATS %.0f texts/s, ratio %.2f", round, bare.PerSecond(), nats.PerSecond(), nats.PerSecond()/bare.PerSecond())
	}
	t.Logf("mean of 3: bare %.0f texts/s, NATS %.0f texts/s, ratio %.2f", sumBare/3, sumNATS/3, sumNATS/sumBare)
	t.Logf("best of 3 (make bench's figure): bare %.0f texts/s, NATS %.0f texts/s, ratio %.2f", bestBare, bestNATS, bestNATS/bestBare)
}
