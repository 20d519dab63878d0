package engine_test

import (
	"reflect"
	"testing"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/schema"
)

func TestOutputsOf(t *testing.T) {
	for _, tt := range []struct {
		in   []schema.Output
		want engine.Output
	}{
		{nil, engine.Dense},
		{[]schema.Output{schema.OutputSparse}, engine.Sparse},
		{[]schema.Output{schema.OutputColBERT, schema.OutputDense}, engine.Dense | engine.ColBERT},
		{[]schema.Output{schema.OutputDense, schema.OutputSparse, schema.OutputColBERT}, engine.Dense | engine.Sparse | engine.ColBERT},
	} {
		if got := engine.OutputsOf(tt.in); got != tt.want {
			t.Errorf("OutputsOf(%v) = %b, want %b", tt.in, got, tt.want)
		}
	}
}

func TestEmbeddingItem(t *testing.T) {
	e := engine.Embedding{Dense: []float32{1, 0}, ColBERT: []float32{1, 2, 3, 4}, ColBERTDim: 2, Tokens: 3, Truncated: true}
	got := e.Item(engine.Dense | engine.Sparse | engine.ColBERT)
	want := schema.Item{
		Dense:     schema.Vector{1, 0},
		Sparse:    &schema.Sparse{IDs: []uint32{}, Weights: schema.Vector{}},
		ColBERT:   []schema.Vector{{1, 2}, {3, 4}},
		Tokens:    3,
		Truncated: true,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Item = %+v, want %+v", got, want)
	}
	if got := e.Item(engine.Sparse); got.Dense != nil || got.ColBERT != nil {
		t.Errorf("Item(Sparse) carries outputs not asked for: %+v", got)
	}
	failed := engine.Embedding{Tokens: 9000, Err: schema.Errorf(schema.CodeTextTooLong, "too long")}
	if got := failed.Item(engine.Dense); got.Error == nil || got.Dense != nil || got.Tokens != 9000 {
		t.Errorf("failed Item = %+v", got)
	}
}
