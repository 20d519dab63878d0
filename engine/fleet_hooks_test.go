package engine

import (
	"context"
	"errors"
	"github.com/jetembed/jetembed/engine/internal/pack"
	"strings"
	"testing"
	"time"

	"github.com/jetembed/jetembed/schema"
)

// TestWarmShapeBetweenRuns checks the fleet's pre-warm: it waits behind a
// running chunk instead of interrupting it, then raises the coverage so
// the guard admits the shape's tier.
func TestWarmShapeBetweenRuns(t *testing.T) {
	block := make(chan struct{})
	inRun := make(chan RunInput, 8)
	f := &factory{mk: func(int) *fakeRunner { return &fakeRunner{block: block, inRun: inRun} }}
	cfg := Config{NoWarmup: true, Guard: true, GuardSeq: 16, MaxTokens: 64, Tiers: []int{8, 16, 32, 64}}
	e, err := New(context.Background(), cfg, fakeTok{}, fakeModel(64), f.new)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	if busy, runs := e.Activity(); busy || runs != 0 {
		t.Fatalf("fresh engine: busy %v, runs %d; want idle, 0", busy, runs)
	}
	embedDone := make(chan []Embedding, 1)
	go func() {
		embs, _, _ := e.Embed(context.Background(), []Text{{Text: "a b c", Outputs: Dense, Truncate: true}}, Call{})
		embedDone <- embs
	}()
	first := <-inRun // the Embed chunk is running and blocked
	if busy, _ := e.Activity(); !busy {
		t.Error("Activity: not busy while a chunk runs")
	}

	warmDone := make(chan error, 1)
	go func() { warmDone <- e.WarmShape(context.Background(), 2, 32) }()
	select {
	case in := <-inRun:
		t.Fatalf("warm-up %dx%d ran while the %dx%d chunk was running", in.Batch, in.Seq, first.Batch, first.Seq)
	case err := <-warmDone:
		t.Fatalf("WarmShape returned %v before the session was free", err)
	case <-time.After(50 * time.Millisecond):
	}
	if e.ShapeWarmed(2, 32) {
		t.Fatal("shape 2x32 warmed before it ran")
	}
	close(block)
	if in := <-inRun; in.Batch != 2 || in.Seq != 32 {
		t.Fatalf("second run %dx%d, want the warm-up 2x32", in.Batch, in.Seq)
	}
	if err := <-warmDone; err != nil {
		t.Fatal(err)
	}
	<-embedDone
	if !e.ShapeWarmed(2, 32) || e.Coverage().Ceiling() != 32 {
		t.Fatalf("after WarmShape: warmed %v, ceiling %d; want true, 32", e.ShapeWarmed(2, 32), e.Coverage().Ceiling())
	}
	busy, runs := e.Activity()
	if busy || runs != 2 {
		t.Errorf("after both runs: busy %v, runs %d; want idle, 2", busy, runs)
	}

	var got []Shape
	for b, s := range e.WarmedShapes() {
		got = append(got, Shape{b, s})
	}
	if len(got) != 2 || got[1] != (Shape{2, 32}) || got[0].Seq >= 16 {
		t.Errorf("WarmedShapes = %v, want the Embed chunk's shape then 2x32", got)
	}

	// The guard now admits a chunk up to the raised ceiling, and still
	// refuses one above it.
	go func() {
		for range inRun {
		}
	}()
	defer close(inRun)
	long := strings.Repeat("w ", 25) // 27 tokens: tier 32
	embs, _, err := e.Embed(context.Background(), []Text{{Text: long, Outputs: Dense, Truncate: true}}, Call{})
	if err != nil || embs[0].Err != nil {
		t.Fatalf("32-token tier after pre-warm: %v / %v", err, embs[0].Err)
	}
	embs, _, err = e.Embed(context.Background(), []Text{{Text: strings.Repeat("w ", 40), Outputs: Dense, Truncate: true}}, Call{})
	if err != nil || embs[0].Err == nil || embs[0].Err.Code != schema.CodeShapeNotWarmed {
		t.Fatalf("64-token tier above the ceiling: err %v, item %v; want shape_not_warmed", err, embs[0].Err)
	}
}

func TestUseCostAndProbe(t *testing.T) {
	f := &factory{}
	e, err := New(context.Background(), Config{NoWarmup: true, MaxTokens: 512}, fakeTok{}, fakeModel(512), f.new)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if a, bq := e.CostModel(); a <= 0 || bq <= 0 {
		t.Fatalf("cost model before any probe: %g %g, want the prior from the model's size", a, bq)
	}
	if err := e.UseCost(0, 0); !errors.Is(err, ErrConfig) {
		t.Errorf("UseCost(0, 0) = %v, want ErrConfig", err)
	}
	if err := e.UseCost(2e-9, 3e-12); err != nil {
		t.Fatal(err)
	}
	if a, bq := e.CostModel(); a != 2e-9 || bq != 3e-12 {
		t.Errorf("cost model after UseCost: %g %g", a, bq)
	}
	// The scheduler uses it: a chunk's modelled cost now bounds its size.
	if got, want := e.sched.seconds(4, 128), (pack.Cost{A: 2e-9, Bq: 3e-12}).Of(4, 128); got < want || got > want+e.sched.cost.r+1e-12 {
		t.Errorf("modelled %g s for 4x128 does not follow the installed cost model (%g s and the per-run cost)", got, want)
	}
	a, bq, err := e.Probe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ca, cbq := e.CostModel(); ca != a || cbq != bq {
		t.Errorf("Probe returned %g %g but installed %g %g", a, bq, ca, cbq)
	}
	if runs := e.Stats().Sessions[0].Runs; runs != 12 {
		t.Errorf("the probe made %d runs, want 3 shapes x 4", runs)
	}
}
