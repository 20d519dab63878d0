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

// The graph interface of the model directory contract.
const (
	InputIDs      = "input_ids"
	InputMask     = "attention_mask"
	OutputHidden  = "last_hidden_state"
	OutputDense   = "dense_vecs"
	OutputSparse  = "sparse_vecs"
	OutputColBERT = "colbert_vecs"
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

// Graph is the interface of an ONNX graph: its input and output names.
type Graph struct {
	Inputs, Outputs []string
}

// Layout reports which export layout g's outputs form. A hidden-state
// export that also has the three heads counts as heads: the graph already
// does the work.
func (g Graph) Layout() (Layout, error) {
	for _, in := range []string{InputIDs, InputMask} {
		if !slices.Contains(g.Inputs, in) {
			return 0, fmt.Errorf("%w: no input %q (inputs %v)", ErrLayout, in, g.Inputs)
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
	switch {
	case has(LayoutHeads.Outputs()...):
		return LayoutHeads, nil
	case has(LayoutHidden.Outputs()...):
		return LayoutHidden, nil
	}
	return 0, fmt.Errorf("%w: outputs %v are neither %v (hidden) nor %v (heads)",
		ErrLayout, g.Outputs, LayoutHidden.Outputs(), LayoutHeads.Outputs())
}
