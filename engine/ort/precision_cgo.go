//go:build cgo

package ort

import (
	"context"
	"errors"
	"fmt"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/model"
)

// rewriteInt8 is model.RewriteInt8; tests replace it to break a rewrite.
var rewriteInt8 = model.RewriteInt8

// int8Options are the rewrite's options for a plan.
func int8Options(plan AttentionPlan) model.Int8Options {
	return model.Int8Options{Attention: plan.Fused, Target: model.AttentionCPU}
}

// decidePrecision decides the sessions' arithmetic once attention is
// decided; fp32 is the session the attention plan kept for the first
// Open (nil when none). It returns the session to keep instead: the int8
// canary's when int8 holds its gates.
func decidePrecision(m *model.Model, p Provider, plan AttentionPlan, fp32 *Session) (PrecisionPlan, *Session) {
	req := p.Precision.orFP32()
	pp := PrecisionPlan{Requested: req}
	keep := func(warn bool, format string, args ...any) (PrecisionPlan, *Session) {
		pp.Int8, pp.Warn, pp.Note = false, warn, fmt.Sprintf(format, args...)
		return pp, fp32
	}
	if req == PrecisionFP32 {
		return keep(false, "float32")
	}
	if k := p.kind(); k != CPU {
		return keep(true, "int8 is for the cpu provider (MLAS's VNNI kernels); %s runs float32", k)
	}
	if q, err := model.Quantized(m.ONNXPath); err != nil {
		return keep(true, "float32: reading the graph: %v", err)
	} else if q {
		pp.Int8, pp.AsExported = true, true
		pp.Note = "the graph is quantized as exported and runs as it is (no rewrite, no canary)"
		return pp, fp32
	}
	rw, err := rewriteInt8(m.ONNXPath, int8Options(plan))
	switch {
	case errors.Is(err, model.ErrNoLinear):
		return keep(true, "float32: %v", err)
	case err != nil:
		return keep(true, "float32: the int8 rewrite failed: %v", err)
	}
	pp.Linears, pp.Quantized, pp.WeightBytes, pp.FP32Bytes = rw.Linears, rw.Quantized, rw.Int8Bytes, rw.FP32Bytes
	fid, s8, err := canaryInt8(m, p, rw, plan, fp32)
	pp.Fidelity = fid
	if err != nil {
		return keep(true, "float32: the int8 graph failed its canary run: %v", err)
	}
	if err := fid.Check(); err != nil {
		s8.Close()
		return keep(true, "float32: int8 refused, its canary against float32 fails a gate: %v (%s)", err, fid)
	}
	if fp32 != nil {
		fp32.Close()
	}
	pp.Int8 = true
	pp.Note = fmt.Sprintf("%s; canary %s", rw.Int8Summary(), fid)
	return pp, s8
}

// canaryInt8 runs the canary texts through float32 (the attention plan's
// session, or one opened for it and closed) and the int8 rewrite, and
// returns their fidelity and the int8 session (the caller closes it).
func canaryInt8(m *model.Model, p Provider, rw *model.Int8Rewrite, plan AttentionPlan, fp32 *Session) (Fidelity, *Session, error) {
	inputs := int8CanaryInputs(m.Config)
	run := func(s *Session) ([]engine.RunOutput, error) {
		var outs []engine.RunOutput
		for _, in := range inputs {
			out, err := s.Run(context.Background(), in)
			if err != nil {
				return nil, err
			}
			outs = append(outs, out)
		}
		return outs, nil
	}
	ref := fp32
	if ref == nil {
		var err error
		if plan.Fused {
			ref, err = openFused(m, p)
		} else {
			ref, err = openGraph(m, p)
		}
		if err != nil {
			return Fidelity{}, nil, fmt.Errorf("float32: %w", err)
		}
		defer ref.Close()
	}
	want, err := run(ref)
	if err != nil {
		return Fidelity{}, nil, fmt.Errorf("float32: %w", err)
	}
	s8, err := openRewrite(m, p, &rw.ONNX, rw.DataDir)
	if err != nil {
		return Fidelity{}, nil, err
	}
	got, err := run(s8)
	if err != nil {
		s8.Close()
		return Fidelity{}, nil, err
	}
	var fid Fidelity
	for i, in := range inputs {
		CompareRuns(&fid, m, in, want[i], got[i])
	}
	return fid, s8, nil
}

// int8CanaryInputs are the attention canary's chunks and a padded chunk
// of four longer texts: a dozen texts of 3 to 128 pseudo-random tokens.
func int8CanaryInputs(c model.Config) []engine.RunInput {
	ins := canaryInputs(c)
	longest := 128
	if c.MaxTokens > 0 {
		longest = min(longest, c.MaxTokens)
	}
	return append(ins, canaryChunk(c, longest, 0x2545f4914f6cdd1d, longest, longest*3/4, longest/3, 9))
}

// openInt8 opens m's int8 rewrite, or takes the canary's.
func openInt8(m *model.Model, p Provider, plan AttentionPlan) (*Session, error) {
	if s := takeSpare(m, p); s != nil {
		return s, nil
	}
	rw, err := rewriteInt8(m.ONNXPath, int8Options(plan))
	if err != nil {
		return nil, fmt.Errorf("ort: %s: int8 rewrite: %w", m.ONNXPath, err)
	}
	return openRewrite(m, p, &rw.ONNX, rw.DataDir)
}
