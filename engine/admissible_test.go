package engine

import (
	"context"
	"errors"
	"math"
	"testing"
)

// TestShapeAdmissible: a shape read from the network is checked against
// what this engine could ever run before it sizes anything; the shapes of
// issue 11 (a batch of 10^15, 8x8192 on a 16k-token budget) are refused
// and WarmShape refuses them without allocating their buffers.
func TestShapeAdmissible(t *testing.T) {
	f := &factory{}
	cfg := Config{NoWarmup: true, MaxTokens: 512, MaxBatch: 8, MaxBatchTokens: 1024, Tiers: []int{8, 16, 32, 64, 128, 256}}
	e, err := New(context.Background(), cfg, fakeTok{}, fakeModel(512), f.new)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, tc := range []struct {
		batch, seq int
		ok         bool
	}{
		{1, 8, true}, {8, 128, true}, {4, 256, true},
		{1, 512, true}, {1, 300, true}, // past the last tier a text pads to its own length
		{1, 100, false}, // between tiers: the packer never pads to it
		{0, 8, false}, {-1, 8, false}, {9, 8, false}, {1_000_000_000_000_000, 8192, false},
		{1, 1, false}, {1, 513, false}, {1, 8192, false}, {1, -8, false},
		{8, 256, false}, // 2048 padded tokens over 1024
	} {
		err := e.ShapeAdmissible(tc.batch, tc.seq)
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, ErrShape) {
			t.Errorf("ShapeAdmissible(%d, %d) = %v, want ok %v", tc.batch, tc.seq, err, tc.ok)
		}
	}
	for _, sh := range []Shape{{1_000_000_000_000_000, 256}, {8, 8192}, {64, 512}} {
		if err := e.WarmShape(context.Background(), sh.Batch, sh.Seq); !errors.Is(err, ErrShape) {
			t.Errorf("WarmShape(%v) = %v, want ErrShape", sh, err)
		}
	}
	if runs := e.Stats().Sessions[0].Runs; runs != 0 {
		t.Errorf("refused shapes made %d runs", runs)
	}
	// A memory budget bounds rows too.
	e.sched.memory = int64(e.sched.cost.bytes(2, 256)) + 1
	if err := e.ShapeAdmissible(2, 256); err != nil {
		t.Errorf("2x256 within the memory budget: %v", err)
	}
	if err := e.ShapeAdmissible(4, 256); !errors.Is(err, ErrShape) {
		t.Errorf("4x256 over the memory budget: %v, want ErrShape", err)
	}
}

// TestUseCostRejectsNetworkGarbage: coefficients from a peer's probe
// record are installed only when they are a plausible cost model.
func TestUseCostRejectsNetworkGarbage(t *testing.T) {
	f := &factory{}
	e, err := New(context.Background(), Config{NoWarmup: true, MaxTokens: 512}, fakeTok{}, fakeModel(512), f.new)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	a0, bq0 := e.CostModel() // the prior from the model's size
	for _, c := range [][2]float64{
		{math.NaN(), 0}, {0, math.NaN()}, {math.Inf(1), 0}, {1e-6, math.Inf(1)},
		{-1e-6, 1e-9}, {1e-6, -1e-9}, {0, 0}, {1e300, 0}, {0, 1e300}, {10, 0},
	} {
		if err := e.UseCost(c[0], c[1]); !errors.Is(err, ErrConfig) {
			t.Errorf("UseCost(%g, %g) = %v, want ErrConfig", c[0], c[1], err)
		}
	}
	if a, bq := e.CostModel(); a != a0 || bq != bq0 {
		t.Errorf("a refused cost model was installed: %g %g", a, bq)
	}
	if err := e.UseCost(2e-5, 3e-9); err != nil {
		t.Errorf("a plausible cost model: %v", err)
	}
}
