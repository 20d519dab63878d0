package engine

import "context"

// Runner is one loaded model session: it runs one padded chunk. The ONNX
// Runtime implementation lives in engine/ort; tests use fakes.
//
// A Runner is used by one goroutine at a time (the pool gives each session
// its own worker, locked to an OS thread).
type Runner interface {
	Run(ctx context.Context, in RunInput) (RunOutput, error)
	Close() error
}

// RunInput is one chunk: Batch rows of Seq token ids, right-padded with the
// pad id; Mask is 1 for real tokens and 0 for padding.
type RunInput struct {
	IDs, Mask  []int64
	Batch, Seq int
}

// RunOutput holds what the graph produced for a chunk, in one of the two
// export layouts (hidden-state or three-head, see engine/model). Slices are row-major.
type RunOutput struct {
	// Hidden-state layout: last_hidden_state, Batch x Seq x Dim.
	Hidden []float32
	// Three-head layout: dense_vecs Batch x Dim, sparse_vecs Batch x Seq
	// (one weight per input position), colbert_vecs Batch x ColBERTLen x
	// ColBERTDim (ColBERTLen is Seq-1 in the known exports: no CLS row).
	Dense      []float32
	Sparse     []float32
	ColBERT    []float32
	ColBERTLen int
	ColBERTDim int
	// Dim is the hidden size (Hidden and Dense).
	Dim int
}
