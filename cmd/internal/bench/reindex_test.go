package bench

import (
	"context"
	"os"
	"runtime/pprof"
	"testing"

	"github.com/jetembed/jetembed/consumer"
)

func TestRepeatCorpus(t *testing.T) {
	old := Corpus(200, 1)
	texts, firstOf := repeatCorpus(200, 1, old)
	if len(texts) != 200 || len(firstOf) != 200 {
		t.Fatalf("%d texts, %d firsts", len(texts), len(firstOf))
	}
	had := map[string]bool{}
	for _, x := range old {
		had[x] = true
	}
	distinct := map[string]int{}
	repeats := 0
	for i, x := range texts {
		if had[x] {
			t.Fatalf("text %d is in the old corpus", i)
		}
		f := firstOf[i]
		if f > i || texts[f] != x || firstOf[f] != f {
			t.Fatalf("text %d: first %d", i, f)
		}
		if f != i {
			repeats++
		} else if _, ok := distinct[x]; ok {
			t.Fatalf("text %d repeats text %d but is its own first", i, distinct[x])
		}
		if _, ok := distinct[x]; !ok {
			distinct[x] = i
		}
	}
	if repeats != 20 || len(distinct) != 180 {
		t.Errorf("%d repeats, %d distinct; want 20 and 180", repeats, len(distinct))
	}
	again, _ := repeatCorpus(200, 1, old)
	for i := range texts {
		if again[i] != texts[i] {
			t.Fatalf("text %d differs between two calls with the same seed", i)
		}
	}
}

// TestReindex runs the re-index part of the suite alone on the tiny model
// (JETEMBED_BENCH_REINDEX_MODEL names another model directory, run with
// BENCH_SESSIONS x BENCH_THREADS,
// JETEMBED_BENCH_REINDEX_TEXTS the corpus size, and
// JETEMBED_BENCH_REINDEX_PROFILE a file for a CPU profile of the second
// run's process). It checks what does not depend on the machine's speed:
// the second run ran no text and every text of it came from the cache.
func TestReindex(t *testing.T) {
	cfg := tinyConfig(t)
	if dir := os.Getenv("JETEMBED_BENCH_REINDEX_MODEL"); dir != "" {
		cfg.ModelDir, cfg.Sessions, cfg.Threads = dir, envInt("BENCH_SESSIONS", 2), envInt("BENCH_THREADS", 1)
	}
	cfg.Texts = envInt("JETEMBED_BENCH_REINDEX_TEXTS", 120)
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
	jobs := Jobs(Corpus(cfg.Texts, cfg.Seed), cfg.Seed)
	if p := os.Getenv("JETEMBED_BENCH_REINDEX_PROFILE"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		reindexProfile = func(start bool) {
			if start {
				pprof.StartCPUProfile(f)
			} else {
				pprof.StopCPUProfile()
			}
		}
		defer func() { reindexProfile = nil }()
	}
	x, err := reindexRuns(ctx, e, consumer.Config{}, jobs, cfg.Seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first %v, again %v (ratio %.3f); again: %d run, %d cached of %d; repeats: %d texts, %d repeated (%d in the same job), %d run of %d distinct, max %d runs, %d cached",
		x.First.Elapsed, x.Again.Elapsed, x.Ratio(), x.Again.Ran, x.Again.Cached, x.Again.Texts,
		x.Repeats.Texts, x.Repeated, x.SameJob, x.Repeats.Ran, x.Repeats.Distinct, x.Repeats.MaxRuns, x.Repeats.Cached)
	if x.First.Texts != cfg.Texts || x.First.Ran != cfg.Texts || x.First.Cached != 0 {
		t.Errorf("first run: %+v", x.First)
	}
	if x.Again.Ran != 0 || x.Again.Cached != cfg.Texts {
		t.Errorf("re-index ran %d texts, %d of %d cached", x.Again.Ran, x.Again.Cached, cfg.Texts)
	}
	if x.Repeats.Distinct != cfg.Texts-x.Repeated {
		t.Errorf("repeats run: %d distinct of %d with %d repeated", x.Repeats.Distinct, x.Repeats.Texts, x.Repeated)
	}
}
