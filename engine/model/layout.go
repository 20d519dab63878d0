package model

import (
	"fmt"
	"slices"
)

// Layout is the shape of a BGE-M3 ONNX export, detected from the graph's
// output names.
type Layout int

const (
	// LayoutHidden exports last_hidden_state; the heads run in Go.
	LayoutHidden Layout = iota + 1
	// LayoutHeads exports dense_vecs, sparse_vecs and colbert_vecs.
	LayoutHeads
)

// The graph interface of the model directory contract. A graph must take
// input_ids and attention_mask; it may also take token_type_ids (fed
// zeros) and position_ids (fed as XLM-R computes them, see
// [Config.PositionIDs]).
const (
	InputIDs       = "input_ids"
	InputMask      = "attention_mask"
	InputTokenType = "token_type_ids"
	InputPositions = "position_ids"
	OutputHidden   = "last_hidden_state"
	// OutputTokenEmbeddings is the hidden state as sentence-transformers'
	// ONNX exports name it (beside their pooled sentence_embedding, which
	// jetembed does not read: dense is computed from the CLS token).
	OutputTokenEmbeddings = "token_embeddings"
	OutputDense           = "dense_vecs"
	OutputSparse          = "sparse_vecs"
	OutputColBERT         = "colbert_vecs"
)

// String returns "hidden" or "heads", the names manifest.json uses.
func (l Layout) String() string {
	switch l {
	case LayoutHidden:
		return "hidden"
	case LayoutHeads:
		return "heads"
	}
	return "unknown"
}

// Outputs lists the graph outputs a layout is run for, in RunOutput order.
func (l Layout) Outputs() []string {
	switch l {
	case LayoutHidden:
		return []string{OutputHidden}
	case LayoutHeads:
		return []string{OutputDense, OutputSparse, OutputColBERT}
	}
	return nil
}

// parseLayout is the inverse of [Layout.String], for manifest.json.
func parseLayout(s string) (Layout, bool) {
	switch s {
	case "hidden":
		return LayoutHidden, true
	case "heads":
		return LayoutHeads, true
	}
	return 0, false
}

// Graph is the interface of an ONNX graph: the inputs it must be fed
// (initializers listed as inputs left out), its outputs, their element
// types, and the external data files its weights are in.
type Graph struct {
	Inputs, Outputs []string
	// Types are the ONNX element types of the inputs and outputs (absent:
	// not declared, taken as int64 inputs and float32 outputs).
	Types map[string]ElemType
	// External are the external data locations the initializers name,
	// relative to the graph's directory, in order of first use.
	External []string
}

// ElemType is an ONNX TensorProto.DataType.
type ElemType int32

// The element types jetembed feeds and reads.
const (
	ElemFloat   ElemType = 1
	ElemInt32   ElemType = 6
	ElemInt64   ElemType = 7
	ElemFloat16 ElemType = 10
)

func (t ElemType) String() string {
	switch t {
	case ElemFloat:
		return "float32"
	case ElemInt32:
		return "int32"
	case ElemInt64:
		return "int64"
	case ElemFloat16:
		return "float16"
	}
	return fmt.Sprintf("type %d", int32(t))
}

// feedable are the inputs jetembed knows how to fill.
var feedable = []string{InputIDs, InputMask, InputTokenType, InputPositions}

// Layout reports which export layout g's outputs form, after checking its
// inputs are ones jetembed can feed. A hidden-state export that also has
// the three heads counts as heads: the graph already does the work.
func (g Graph) Layout() (Layout, error) {
	for _, in := range []string{InputIDs, InputMask} {
		if !slices.Contains(g.Inputs, in) {
			return 0, fmt.Errorf("%w: no input %q (inputs %v)", ErrLayout, in, g.Inputs)
		}
	}
	for _, in := range g.Inputs {
		if !slices.Contains(feedable, in) {
			return 0, fmt.Errorf("%w: input %q (inputs %v): jetembed feeds only %v", ErrLayout, in, g.Inputs, feedable)
		}
		if t, ok := g.Types[in]; ok && t != ElemInt64 && t != ElemInt32 {
			return 0, fmt.Errorf("%w: input %q is %v, want int64 or int32", ErrLayout, in, t)
		}
	}
	has := func(names ...string) bool {
		for _, n := range names {
			if !slices.Contains(g.Outputs, n) {
				return false
			}
		}
		return true
	}
	var l Layout
	switch {
	case has(LayoutHeads.Outputs()...):
		l = LayoutHeads
	case has(OutputHidden) || has(OutputTokenEmbeddings):
		l = LayoutHidden
	}
	for _, out := range g.RunOutputs(l) {
		if t, ok := g.Types[out]; ok && t != ElemFloat {
			return 0, fmt.Errorf("%w: output %q is %v, want float32 (use a float32 export, or one that casts its outputs back, as model_fp16.onnx files made with keep_io_types do)", ErrLayout, out, t)
		}
	}
	if l != 0 {
		return l, nil
	}
	return 0, fmt.Errorf("%w: outputs %v are neither %v or [%s] (hidden) nor %v (heads)",
		ErrLayout, g.Outputs, LayoutHidden.Outputs(), OutputTokenEmbeddings, LayoutHeads.Outputs())
}

// RunOutputs lists the outputs of g that a session of layout l runs for,
// in RunOutput order: [Layout.Outputs], with the hidden state under the
// name g gives it (last_hidden_state, else token_embeddings).
func (g Graph) RunOutputs(l Layout) []string {
	if l == LayoutHidden && !slices.Contains(g.Outputs, OutputHidden) && slices.Contains(g.Outputs, OutputTokenEmbeddings) {
		return []string{OutputTokenEmbeddings}
	}
	return l.Outputs()
}
