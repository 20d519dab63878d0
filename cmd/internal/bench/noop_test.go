package bench

import (
	"context"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"testing"
	"time"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
)

// TestNoopRatio times the no-op rows of the suite alone, in turns (the
// bare no-op engine, then the same engine through NATS) and logs their
// rates and ratio: the figure the loop overhead is read from. It asserts
// nothing about speed (the machine is shared). It runs with
// JETEMBED_BENCH_NOOP=1; JETEMBED_BENCH_NOOP_MODEL names another model
// directory (the bench's small model). JETEMBED_BENCH_NOOP_PROFILE names a
// file for a CPU profile and JETEMBED_BENCH_NOOP_TRACE one for an execution
// trace of the second NATS run (the first warms the process), and
// JETEMBED_BENCH_NOOP_BARE_PROFILE one for a CPU profile of the second bare
// run.
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
	var sumBare, sumNATS, bestBare, bestNATS float64
	for round := range 3 {
		var bare Rate
		var nats Bulk
		r0, b0 := runsBusy(noop)
		observe(t, round, "JETEMBED_BENCH_NOOP_BARE_PROFILE", "", func() { bare, err = bareEngine(ctx, noop, jobs, len(jobs)) })
		if err != nil {
			t.Fatal(err)
		}
		r1, b1 := runsBusy(noop)
		observe(t, round, "JETEMBED_BENCH_NOOP_PROFILE", "JETEMBED_BENCH_NOOP_TRACE", func() { nats, err = bulkRun(ctx, noop, cc, jobs) })
		if err != nil {
			t.Fatal(err)
		}
		r2, b2 := runsBusy(noop)
		sumBare += bare.PerSecond()
		sumNATS += nats.PerSecond()
		bestBare, bestNATS = max(bestBare, bare.PerSecond()), max(bestNATS, nats.PerSecond())
		t.Logf("round %d: bare %.0f texts/s, NATS %.0f texts/s, ratio %.2f; cores busy: bare %.2f, NATS %.2f; CPU a text: bare %.1f µs, NATS %.1f µs; session runs: bare %d (%v busy), NATS %d (%v busy)",
			round, bare.PerSecond(), nats.PerSecond(), nats.PerSecond()/bare.PerSecond(),
			bare.Cores(), nats.Cores(), bare.CPUPerText(), nats.CPUPerText(), r1-r0, b1-b0, r2-r1, b2-b1)
	}
	t.Logf("mean of 3: bare %.0f texts/s, NATS %.0f texts/s, ratio %.2f", sumBare/3, sumNATS/3, sumNATS/sumBare)
	t.Logf("best of 3 (make bench's figure): bare %.0f texts/s, NATS %.0f texts/s, ratio %.2f", bestBare, bestNATS, bestNATS/bestBare)
}

func runsBusy(e *engine.Engine) (runs int64, busy time.Duration) {
	for _, s := range e.Stats().Sessions {
		runs += s.Runs
		busy += s.Busy
	}
	return runs, busy
}

// observe runs f; in round 1 it writes a CPU profile of f to the file
// named by $profileEnv and an execution trace to the one named by
// $traceEnv, where set.
func observe(t *testing.T, round int, profileEnv, traceEnv string, f func()) {
	t.Helper()
	if round != 1 {
		f()
		return
	}
	create := func(env string) *os.File {
		name := os.Getenv(env)
		if env == "" || name == "" {
			return nil
		}
		file, err := os.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { file.Close() })
		return file
	}
	if file := create(profileEnv); file != nil {
		if err := pprof.StartCPUProfile(file); err != nil {
			t.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	if file := create(traceEnv); file != nil {
		if err := trace.Start(file); err != nil {
			t.Fatal(err)
		}
		defer trace.Stop()
	}
	f()
}
