package bench

import (
	"strings"
	"testing"
	"time"
)

func TestDenseFLOPs(t *testing.T) {
	// BGE-M3 (XLM-R large): 24 layers, hidden 1024, intermediate 4096:
	// 2 x 24 x (4 x 1024^2 + 2 x 1024 x 4096) = 603,979,776 FLOP a token.
	if got := denseFLOPs(24, 1024, 4096); got != 603979776 {
		t.Errorf("denseFLOPs(BGE-M3) = %.0f, want 603979776", got)
	}
	r := &Report{Config: Config{Sessions: 2, Threads: 1}, DenseFLOPs: 1e6}
	// 4000 tokens x 1 MFLOP in 1 s over 2 cores: 2 GFLOP/s a core.
	if got := r.GFLOPsPerCore(4000, time.Second); got != 2 {
		t.Errorf("GFLOPsPerCore = %v, want 2", got)
	}
	if got := r.GFLOPsPerCore(4000, 0); got != 0 {
		t.Errorf("GFLOPsPerCore over no time = %v, want 0", got)
	}
}

// TestReindexRows renders the re-index rows of the table and their
// verdicts.
func TestReindexRows(t *testing.T) {
	run := func(texts, ran, distinct, maxRuns, cached int, d time.Duration) CacheRun {
		return CacheRun{Rate: Rate{Texts: texts, Elapsed: d}, Jobs: 10, Ran: ran, Distinct: distinct, MaxRuns: maxRuns, Cached: cached}
	}
	for _, c := range []struct {
		name string
		x    Reindex
		want []string
	}{
		{"met", Reindex{First: run(100, 100, 100, 1, 0, 10*time.Second), Again: run(100, 0, 100, 0, 100, time.Second),
			Repeats: run(100, 90, 90, 1, 0, 10*time.Second), Repeated: 10, SameJob: 4},
			[]string{"| 0.100 (1.00 s / 10.00 s; 0.100 with the queueing of each counted in) | <= 0.20 | met |",
				"usage.cached: 100 of 100) | 0 | 0 | met |",
				"(4 in its job, 6 in another job)", "| 90 / 90, 1 | each distinct text once | met |"}},
		{"missed", Reindex{First: run(100, 100, 100, 1, 0, 10*time.Second), Again: run(100, 3, 100, 1, 97, 3*time.Second),
			Repeats: run(100, 96, 90, 2, 0, 10*time.Second), Repeated: 10, SameJob: 4},
			[]string{"| 0.300 (3.00 s / 10.00 s; 0.300 with the queueing of each counted in) | <= 0.20 | **missed** |",
				"usage.cached: 97 of 100) | 3 | 0 | **missed** |",
				"| 96 / 90, 2 | each distinct text once | **missed** |"}},
	} {
		r := &Report{Reindex: &c.x}
		var b strings.Builder
		if err := r.Markdown(&b); err != nil {
			t.Fatal(err)
		}
		for _, w := range c.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s: table lacks %q:\n%s", c.name, w, b.String())
			}
		}
	}
}
