package engine

import (
	"context"
	"sync"
	"testing"
	"time"
)

type recMetrics struct {
	mu       sync.Mutex
	tokenize int
	runs     map[string]int
	refused  int
}

func (m *recMetrics) Tokenize(context.Context, time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tokenize++
}

func (m *recMetrics) Run(_ context.Context, session string, _ time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.runs[session]++
}

func (m *recMetrics) GuardRefusal(context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refused++
}

// TestMetricsFed: the engine records what only it knows — the tokenize
// time of each call, every session run under its session's index, and
// each chunk the JIT guard refused (none of which was recorded before).
func TestMetricsFed(t *testing.T) {
	cfg := testConfig()
	cfg.Sessions = 2
	cfg.Guard, cfg.GuardSeq = true, 32
	cfg.NoWarmup, cfg.Warmup = false, []Shape{{1, 8}, {1, 16}}
	e := newTestEngine(t, cfg, nil)
	m := &recMetrics{runs: map[string]int{}}
	e.SetMetrics(m)
	texts := []Text{
		{Text: words(3, 0), Outputs: Dense},  // seq 8
		{Text: words(25, 0), Outputs: Dense}, // seq 32: refused
		{Text: words(12, 0), Outputs: Dense}, // seq 16
	}
	for range 4 {
		if _, _, err := e.Embed(context.Background(), texts, Call{}); err != nil {
			t.Fatal(err)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tokenize != 4 {
		t.Errorf("%d tokenize records for 4 calls", m.tokenize)
	}
	if m.refused != 4 {
		t.Errorf("%d guard refusals recorded, want one a call", m.refused)
	}
	total := 0
	for s, n := range m.runs {
		if s != "0" && s != "1" {
			t.Errorf("run recorded under session %q", s)
		}
		total += n
	}
	if runs := int(e.Stats().Sessions[0].Runs + e.Stats().Sessions[1].Runs); total == 0 || total > runs {
		t.Errorf("%d runs recorded, sessions ran %d (warm-up before SetMetrics included)", total, runs)
	}
}
