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
