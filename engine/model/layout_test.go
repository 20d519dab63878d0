package model_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/jetembed/jetembed/engine/model"
	"github.com/jetembed/jetembed/engine/model/modeltest"
)

func TestGraphLayout(t *testing.T) {
	in := []string{"input_ids", "attention_mask"}
	tests := []struct {
		g    model.Graph
		want model.Layout
		err  error
	}{
		{model.Graph{Inputs: in, Outputs: []string{"last_hidden_state"}}, model.LayoutHidden, nil},
		{model.Graph{Inputs: in, Outputs: []string{"colbert_vecs", "dense_vecs", "sparse_vecs"}}, model.LayoutHeads, nil},
		{model.Graph{Inputs: in, Outputs: []string{"last_hidden_state", "dense_vecs", "sparse_vecs", "colbert_vecs"}}, model.LayoutHeads, nil},
		{model.Graph{Inputs: in, Outputs: []string{"dense_vecs", "sparse_vecs"}}, 0, model.ErrLayout},
		{model.Graph{Inputs: in, Outputs: []string{"logits"}}, 0, model.ErrLayout},
		{model.Graph{Inputs: in, Outputs: []string{"sentence_embedding", "token_embeddings"}}, model.LayoutHidden, nil},
		{model.Graph{Inputs: in, Outputs: []string{"sentence_embedding"}}, 0, model.ErrLayout},
		{model.Graph{Inputs: []string{"input_ids"}, Outputs: []string{"last_hidden_state"}}, 0, model.ErrLayout},
	}
	for _, tt := range tests {
		got, err := tt.g.Layout()
		if got != tt.want || !errors.Is(err, tt.err) {
			t.Errorf("%v.Layout() = %v, %v; want %v, %v", tt.g, got, err, tt.want, tt.err)
		}
	}
	if model.Layout(0).String() != "unknown" {
		t.Errorf("zero layout = %q", model.Layout(0))
	}
}

func TestReadGraphBoth(t *testing.T) {
	for _, l := range []model.Layout{model.LayoutHidden, model.LayoutHeads} {
		s := modeltest.Tiny
		s.Layout = l
		path := filepath.Join(t.TempDir(), "model.onnx")
		must(t, os.WriteFile(path, s.ONNX(), 0o644))
		g, err := model.ReadGraph(path)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(g.Outputs, l.Outputs()) {
			t.Errorf("%v outputs = %v, want %v", l, g.Outputs, l.Outputs())
		}
	}
}

// TestReadGraphSkipsLargeFields puts multi-MB fields before and inside the
// graph (as inline initializers are) to exercise the seeking path.
func TestReadGraphSkipsLargeFields(t *testing.T) {
	big := make([]byte, 3<<20)
	var tensor []byte // TensorProto: name, inline raw_data
	tensor = protowire.AppendTag(tensor, 8, protowire.BytesType)
	tensor = protowire.AppendString(tensor, "w")
	tensor = protowire.AppendTag(tensor, 9, protowire.BytesType)
	tensor = protowire.AppendBytes(tensor, big)
	var graph []byte
	graph = protowire.AppendTag(graph, 5, protowire.BytesType) // initializer
	graph = protowire.AppendBytes(graph, tensor)
	for num, name := range map[protowire.Number]string{11: "input_ids", 12: "last_hidden_state"} {
		vi := protowire.AppendTag(nil, 1, protowire.BytesType)
		vi = protowire.AppendString(vi, name)
		graph = protowire.AppendTag(graph, num, protowire.BytesType)
		graph = protowire.AppendBytes(graph, vi)
	}
	var m []byte
	m = protowire.AppendTag(m, 1, protowire.VarintType)
	m = protowire.AppendVarint(m, 8)
	m = protowire.AppendTag(m, 2, protowire.BytesType)
	m = protowire.AppendBytes(m, big)
	m = protowire.AppendTag(m, 7, protowire.BytesType)
	m = protowire.AppendBytes(m, graph)
	path := filepath.Join(t.TempDir(), "model.onnx")
	must(t, os.WriteFile(path, m, 0o644))
	g, err := model.ReadGraph(path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g.Inputs, []string{"input_ids"}) || !slices.Equal(g.Outputs, []string{"last_hidden_state"}) {
		t.Errorf("graph = %+v", g)
	}
	// Cut inside the graph: the reader must notice, not return a partial graph.
	must(t, os.WriteFile(path, m[:len(m)-10], 0o644))
	if _, err := model.ReadGraph(path); !errors.Is(err, model.ErrInvalid) {
		t.Errorf("truncated model: err = %v", err)
	}
}
