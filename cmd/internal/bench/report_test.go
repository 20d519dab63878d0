package bench

import (
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
