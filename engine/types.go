package engine

import (
	"time"

	"github.com/jetembed/jetembed/schema"
)

// Output is a set of vector kinds a text asks for.
type Output uint8

// The vector kinds of BGE-M3.
const (
	Dense Output = 1 << iota
	Sparse
	ColBERT
)

// Has reports whether o includes k.
func (o Output) Has(k Output) bool { return o&k != 0 }

// Text is one text to embed, with what its job asked for.
type Text struct {
	Text    string
	Outputs Output
	// Truncate cuts a text longer than the model's maximum and flags it;
	// without it such a text fails alone with text_too_long.
	Truncate bool
}

// Embedding is the result for one [Text]. Slices are owned by the caller.
type Embedding struct {
	Dense []float32
	// SparseIDs are sorted ascending; SparseWeights[i] belongs to SparseIDs[i].
	SparseIDs     []uint32
	SparseWeights []float32
	// ColBERT holds one row of ColBERTDim values (row-major) per token
	// after CLS of the text as run: Tokens-1 rows, or MaxTokens-1 when
	// the text was truncated.
	ColBERT    []float32
	ColBERTDim int
	// Tokens counts the text's tokens including special tokens, before
	// truncation.
	Tokens    int
	Truncated bool
	// Err is a per-item failure (text_too_long, invalid_utf8), or a
	// retriable refusal of the chunk that held this text
	// (shape_not_warmed, engine_unavailable). Other items are unaffected.
	Err *schema.Error
}

// ChunkReport describes one session run.
type ChunkReport struct {
	Session      int // index of the session that ran it
	Batch, Seq   int // padded shape
	Texts        int
	RealTokens   int
	PaddedTokens int // Batch * Seq
	// Items are the indexes (into the Embed call's texts) packed in it.
	Items []int
}

// CallReport describes an Embed call: its chunks and token totals.
type CallReport struct {
	Chunks       []ChunkReport
	Tokens       int // real tokens run
	PaddedTokens int // tokens run including padding
	// Compute is the call's share of the session time of the runs that
	// held its texts: each run's time times the call's rows over the
	// run's rows (every row of a run is padded alike). What a job cost,
	// for metering.
	Compute time.Duration
}
