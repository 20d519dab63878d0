//go:build !cgo

package ort

import (
	"context"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/model"
)

// Init reports [ErrNoCgo]: ONNX Runtime needs cgo.
func Init(LibraryOptions) (Library, error) { return Library{}, ErrNoCgo }

// Session is a stand-in that cannot be opened without cgo.
type Session struct{}

var _ engine.Runner = (*Session)(nil)

// Open reports [ErrNoCgo] after checking p, so configuration errors still
// surface first.
func Open(_ *model.Model, p Provider) (*Session, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return nil, ErrNoCgo
}

// Run reports [ErrNoCgo].
func (*Session) Run(context.Context, engine.RunInput) (engine.RunOutput, error) {
	return engine.RunOutput{}, ErrNoCgo
}

// Close does nothing.
func (*Session) Close() error { return nil }

// PlanAttention reports [ErrNoCgo] after checking p.
func PlanAttention(_ *model.Model, p Provider) (AttentionPlan, error) {
	if err := p.Validate(); err != nil {
		return AttentionPlan{}, err
	}
	return AttentionPlan{}, ErrNoCgo
}

// Attention reports the zero plan.
func (*Session) Attention() AttentionPlan { return AttentionPlan{} }
