package main

import (
	"errors"
	"fmt"

	"github.com/jetembed/jetembed/schema"
)

// outputLine is one line of the output of submit, embed and results, the
// same on every path (docs/commands.md, "Output lines"): the id of its input line
// (the line's "id", else its line number), the model, and the item:
// dense, sparse {ids, weights}, colbert, tokens, truncated, or error
// {code, message}.
type outputLine struct {
	ID    string `json:"id"`
	Model string `json:"model,omitempty"`
	schema.Item
}

// newOutputLine builds the line of one item. An empty sparse vector is
// {"ids":[],"weights":[]} whichever path computed it: msgpack carries an
// empty list as nil.
func newOutputLine(id, model string, it schema.Item) outputLine {
	if s := it.Sparse; s != nil && (s.IDs == nil || s.Weights == nil) {
		c := *s
		if c.IDs == nil {
			c.IDs = []uint32{}
		}
		if c.Weights == nil {
			c.Weights = schema.Vector{}
		}
		it.Sparse = &c
	}
	return outputLine{ID: id, Model: model, Item: it}
}

// errBadLines marks the error of a command some of whose input lines
// failed; main exits 1 with "N of M lines failed".
var errBadLines = errors.New("lines failed")

// linesFailed is the error of a run in which failed of total lines failed,
// nil when none did.
func linesFailed(failed, total int) error {
	if failed == 0 {
		return nil
	}
	return &failedLines{failed: failed, total: total}
}

type failedLines struct{ failed, total int }

func (e *failedLines) Error() string        { return fmt.Sprintf("%d of %d lines failed", e.failed, e.total) }
func (e *failedLines) Is(target error) bool { return target == errBadLines }
