package engine

import (
	"context"
	"testing"

	"github.com/jetembed/jetembed/engine/model"
)

// bgeM3 is BGE-M3's config, and small the MiniLM-size benchmark model's:
// what the cost and memory models size.
var (
	bgeM3 = model.Config{HiddenSize: 1024, Layers: 24, Heads: 16, Intermediate: 4096, MaxTokens: 8192, VocabSize: 250002, PadID: 1, EOSID: 2}
	small = model.Config{HiddenSize: 384, Layers: 6, Heads: 12, Intermediate: 1536, MaxTokens: 8192, VocabSize: 250002, PadID: 1, EOSID: 2}
)

// TestMemoryModelFollowsAttention: the graph's attention holds heads x S x
// S scores a layer, the fused form none, so under one budget the fused
// form admits the model's full length where the graph's cuts texts.
func TestMemoryModelFollowsAttention(t *testing.T) {
	graph, fused := newCostModelFor(bgeM3, AttentionGraph, PrecisionFP32), newCostModelFor(bgeM3, AttentionFused, PrecisionFP32)
	if fused.memB != 0 || graph.memB == 0 {
		t.Fatalf("S^2 terms: graph %g, fused %g", graph.memB, fused.memB)
	}
	// Linear: twice the tokens, twice the bytes.
	if r := fused.bytes(1, 8192) / fused.bytes(1, 4096); r != 2 {
		t.Errorf("fused 8192/4096 tokens = %.3g x the bytes, want 2", r)
	}
	const budget = 2 << 30
	if got := graph.maxSeq(budget); got >= 8192 {
		t.Errorf("graph: %d tokens fit 2 GiB; the scores of 8192 are 4 GiB a layer", got)
	}
	if got := fused.maxSeq(budget); got < 8192 {
		t.Errorf("fused: only %d tokens fit 2 GiB", got)
	}
	m := &model.Model{ID: "m3@000000000000", Layout: model.LayoutHeads, Config: bgeM3}
	for _, tc := range []struct {
		a    Attention
		want func(int) bool
	}{
		{AttentionGraph, func(n int) bool { return n < 8192 }},
		{AttentionFused, func(n int) bool { return n == 8192 }},
	} {
		e, err := New(context.Background(), Config{NoWarmup: true, MemoryBudget: budget, Attention: tc.a}, fakeTok{}, m, (&factory{}).new)
		if err != nil {
			t.Fatal(err)
		}
		if !tc.want(e.MaxTokens()) {
			t.Errorf("%v attention under 2 GiB: max tokens %d", tc.a, e.MaxTokens())
		}
		e.Close()
	}
}

// TestLongTextsBatchWhenFused: where a run's fixed cost makes batching
// pay, two long texts share a chunk once their workspace is linear; with
// the graph's scores the same budget keeps them apart.
func TestLongTextsBatchWhenFused(t *testing.T) {
	const n = 4000
	for _, tc := range []struct {
		a    Attention
		rows int
	}{{AttentionGraph, 1}, {AttentionFused, 2}} {
		cost := newCostModelFor(small, tc.a, PrecisionFP32)
		cost.r = 1 // a per-run cost worth sharing (a GPU's launch and sync)
		graph := newCostModelFor(small, AttentionGraph, PrecisionFP32)
		budget := int64(graph.bytes(1, n+2)) + 1 // one long text in the graph's form
		cfg := Config{MaxBatch: 8, MaxBatchTokens: 4 * n, MemoryBudget: budget, Sessions: 1}
		s := newSched(cfg, cost, func(int) bool { return false })
		s.learn = false
		c := &call{class: interactive, done: make(chan chunkDone, 2)}
		if err := s.enqueue(c, []int{0, 1}, []int{n, n}); err != nil {
			t.Fatal(err)
		}
		w := s.next(0)
		if len(w.rows) != tc.rows {
			t.Errorf("%v: first chunk of two %d-token texts has %d rows, want %d", tc.a, n, len(w.rows), tc.rows)
		}
		s.close()
	}
}

// TestCostModelFollowsPrecision: int8's prior runs a token's linear layers
// faster and holds more workspace a token (the quantized activations), the
// S^2 term following attention alone.
func TestCostModelFollowsPrecision(t *testing.T) {
	for _, a := range []Attention{AttentionGraph, AttentionFused} {
		fp32, int8 := newCostModelFor(bgeM3, a, PrecisionFP32), newCostModelFor(bgeM3, a, PrecisionInt8)
		if !(int8.a < fp32.a) || int8.bq != fp32.bq || int8.r != fp32.r {
			t.Errorf("%v: run time a %g/%g, bq %g/%g", a, int8.a, fp32.a, int8.bq, fp32.bq)
		}
		if !(int8.memA > fp32.memA) || int8.memB != fp32.memB {
			t.Errorf("%v: memory a %g/%g, b %g/%g", a, int8.memA, fp32.memA, int8.memB, fp32.memB)
		}
		if int8.seconds(4, 128) >= fp32.seconds(4, 128) {
			t.Errorf("%v: int8 chunk modelled no faster: %g s vs %g s", a, int8.seconds(4, 128), fp32.seconds(4, 128))
		}
	}
	if PrecisionInt8.String() != "int8" || PrecisionFP32.String() != "fp32" {
		t.Error("precision names")
	}
}
