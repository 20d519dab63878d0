package bench

import (
	"fmt"
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

// TestFairRows: the fairness rows say met or missed against the goals of
// issue 32 (B's p99 within its idle p99 + 2 chunk caps; 3:1 +-10%).
func TestFairRows(t *testing.T) {
	ms := time.Millisecond
	r := &Report{
		Fair: []Fairness{
			{Mode: "one consumer", InFlight: 131072, Backlog: 500, BacklogTokens: 9000, Drain: 5 * time.Second,
				Idle: []time.Duration{10 * ms, 12 * ms}, Under: []time.Duration{900 * ms, 4000 * ms}, Ahead: 160, Chunk: 95 * ms},
			{Mode: "per-tenant consumers", PerTenant: true, InFlight: 512, Backlog: 500, BacklogTokens: 9000, Drain: 4 * time.Second,
				Idle: []time.Duration{8 * ms}, Under: []time.Duration{100 * ms, 150 * ms}, Ahead: 11, Chunk: 33 * ms},
		},
		Weighted: Weighted{Jobs: 250, Window: 246, InFlight: 512, Results: [2]int{183, 63}, Tokens: [2]int{7304, 2431}},
	}
	var rows []string
	r.fairRows(func(format string, args ...any) { rows = append(rows, fmt.Sprintf(format, args...)) })
	if len(rows) != 4 {
		t.Fatalf("%d rows: %q", len(rows), rows)
	}
	for i, want := range []string{
		"p99 <= 212.00 ms (B's idle job p99 12.00 ms + 2 x max-chunk-latency 100.00 ms) | **missed** |",
		"150.00 ms, 11 | p99 <= 208.00 ms",
		"5.00 s (mean chunk 95.00 ms) / 4.00 s (mean chunk 33.00 ms) | reported |",
		"7304 / 2431 = 3.00 | 3.0 +-10% (2.70 to 3.30) | met |",
	} {
		if !strings.Contains(rows[i], want) {
			t.Errorf("row %d lacks %q:\n%s", i, want, rows[i])
		}
	}
	if !strings.HasSuffix(strings.TrimSpace(rows[1]), "| met |") {
		t.Errorf("bounded row not met: %s", rows[1])
	}
	r.Weighted.Tokens = [2]int{7304, 3000}
	if r.Weighted.Met() {
		t.Errorf("split %.2f met", r.Weighted.Split())
	}
	if (Fairness{}).Met() {
		t.Error("no jobs under the backlog met the goal")
	}
}

// TestNoopCPURows: the no-op row and the raw table say what each run cost
// in CPU a text and cores, and n/a for a run whose CPU was not measured.
func TestNoopCPURows(t *testing.T) {
	r := &Report{
		NoopEngine: Rate{Texts: 30000, Elapsed: time.Second, CPU: 900 * time.Millisecond},
		Noop:       Bulk{Rate: Rate{Texts: 30000, Elapsed: 2 * time.Second, CPU: 2400 * time.Millisecond}},
		Arrival:    Rate{Texts: 100, Elapsed: time.Second},
	}
	var b strings.Builder
	if err := r.Markdown(&b); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"| 0.50 (15000 / 30000; CPU a text 80.0 / 30.0 µs on 1.20 / 0.90 cores) | >= 0.6 | **missed** |",
		"| 30000 | 2.00 | 15000.0 | n/a | 1.20, 80.0 |",
		"| 30000 | 1.00 | 30000.0 | n/a | 0.90, 30.0 |",
		"| 100 | 1.00 | 100.0 | n/a | n/a |",
	} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("report lacks %q:\n%s", w, b.String())
		}
	}
}
