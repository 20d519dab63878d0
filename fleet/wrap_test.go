package fleet_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/jetembed/jetembed/fleet"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/schema"
)

// cannedEmbedder returns fixed embeddings and report, and says its model
// and token limit.
type cannedEmbedder struct {
	embs []engine.Embedding
	rep  engine.CallReport
	err  error
}

func (c cannedEmbedder) Embed(context.Context, []engine.Text, engine.Call) ([]engine.Embedding, engine.CallReport, error) {
	return c.embs, c.rep, c.err
}
func (cannedEmbedder) ModelID() string { return "m@0123456789ab" }
func (cannedEmbedder) MaxTokens() int  { return 512 }

type wantLog [][2]int

func (w *wantLog) Want(batch, seq int) { *w = append(*w, [2]int{batch, seq}) }

func TestWrap(t *testing.T) {
	refused := schema.Errorf(schema.CodeShapeNotWarmed, "above the ceiling")
	unavailable := schema.Errorf(schema.CodeEngineUnavailable, "reloading")
	inner := cannedEmbedder{
		embs: []engine.Embedding{
			{Dense: []float32{1}}, {Err: refused}, {Err: refused}, {Err: unavailable}, {Err: refused},
		},
		rep: engine.CallReport{Chunks: []engine.ChunkReport{
			{Batch: 1, Seq: 16, Items: []int{0}},
			{Batch: 2, Seq: 128, Items: []int{1, 2}},
			{Batch: 1, Seq: 64, Items: []int{3}},
			{Batch: 1, Seq: 256, Items: []int{4}},
			{Batch: 1, Seq: 8}, // no items: ignored
		}},
	}
	var w wantLog
	emb := fleet.Wrap(inner, &w)
	embs, rep, err := emb.Embed(context.Background(), make([]engine.Text, 5), engine.Call{})
	if err != nil || len(embs) != 5 || len(rep.Chunks) != 5 {
		t.Fatalf("Embed = %d embeddings, %d chunks, %v; want the inner results", len(embs), len(rep.Chunks), err)
	}
	if want := (wantLog{{2, 128}, {1, 256}}); !slices.Equal(w, want) {
		t.Errorf("wants = %v, want %v (only shape_not_warmed chunks)", w, want)
	}

	m, ok := emb.(interface {
		ModelID() string
		MaxTokens() int
	})
	if !ok || m.ModelID() != "m@0123456789ab" || m.MaxTokens() != 512 {
		t.Errorf("model id and max tokens not passed through: %v", ok)
	}

	w = nil
	boom := errors.New("boom")
	if _, _, err := fleet.Wrap(cannedEmbedder{err: boom, rep: inner.rep, embs: inner.embs}, &w).Embed(context.Background(), nil, engine.Call{}); !errors.Is(err, boom) || len(w) != 0 {
		t.Errorf("failed call: err %v, wants %v; want the error and no wants", err, w)
	}
}
