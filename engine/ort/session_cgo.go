//go:build cgo

package ort

import (
	"context"
	"errors"
	"fmt"
	"slices"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/model"
)

// Session is one ONNX Runtime session of a model; it implements
// engine.Runner. It is used by one goroutine at a time.
type Session struct {
	sess    *ort.DynamicAdvancedSession
	runOpts *ort.RunOptions
	layout  model.Layout
	dim     int // hidden size
	outputs int
	cpu     bool // runs count for the idle trim of the C heap
	plan    AttentionPlan
	// inputs are the graph's inputs in feed order: input_ids and
	// attention_mask, and token_type_ids or position_ids if it takes them.
	inputs []string
	int32s map[string]bool // inputs declared int32 rather than int64
	config model.Config    // position ids follow its model type and pad id
	// feeds are the buffers of the inputs made here (token types,
	// positions, int32 copies), reused from run to run: ORT reads them
	// only during a run, and a session runs one chunk at a time.
	feeds   map[string][]int64
	feeds32 map[string][]int32
}

var _ engine.Runner = (*Session)(nil)

// Open creates a session for m on provider p. It calls [Init] with default
// [LibraryOptions] if the library is not loaded yet. A provider that cannot
// be registered (a CUDA request on a CPU-only build, a missing GPU) is an
// error wrapping [ErrProvider], never a silent CPU fallback. The session
// computes attention as the model's [AttentionPlan] says (decided by the
// first Open, or [PlanAttention], for the process).
func Open(m *model.Model, p Provider) (*Session, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if _, err := Init(LibraryOptions{}); err != nil {
		return nil, err
	}
	plan, err := PlanAttention(m, p)
	if err != nil {
		return nil, err
	}
	var s *Session
	switch {
	case plan.Precision.Int8 && !plan.Precision.AsExported:
		s, err = openInt8(m, p, plan)
	case plan.Fused:
		s, err = openFused(m, p)
	default:
		s, err = openGraph(m, p)
	}
	if err != nil {
		return nil, err
	}
	s.plan = plan
	return s, nil
}

// openGraph opens m's graph as exported.
func openGraph(m *model.Model, p Provider) (*Session, error) {
	return newSession(m, p, func(so *ort.SessionOptions, inputs, outputs []string) (*ort.DynamicAdvancedSession, error) {
		return ort.NewDynamicAdvancedSession(m.ONNXPath, inputs, outputs, so)
	})
}

// newSession creates the session create makes with p's options, for the
// graph inputs and outputs the session feeds and reads.
func newSession(m *model.Model, p Provider, create func(so *ort.SessionOptions, inputs, outputs []string) (*ort.DynamicAdvancedSession, error)) (*Session, error) {
	inputs := []string{model.InputIDs, model.InputMask}
	for _, in := range m.Graph.Inputs {
		if !slices.Contains(inputs, in) {
			inputs = append(inputs, in)
		}
	}
	so, err := sessionOptions(p, inputs)
	if err != nil {
		return nil, err
	}
	defer so.Destroy()
	outputs := m.Graph.RunOutputs(m.Layout)
	if outputs == nil {
		return nil, fmt.Errorf("ort: %s: layout %v has no outputs", m.ONNXPath, m.Layout)
	}
	sess, err := create(so, inputs, outputs)
	if err != nil {
		return nil, fmt.Errorf("ort: open %s on %v: %w", m.ONNXPath, p, err)
	}
	ro, err := ort.NewRunOptions()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("ort: run options: %w", err), sess.Destroy())
	}
	s := &Session{sess: sess, runOpts: ro, layout: m.Layout, dim: m.Config.HiddenSize, outputs: len(outputs), cpu: p.kind() == CPU,
		inputs: inputs, int32s: map[string]bool{}, config: m.Config, feeds: map[string][]int64{}, feeds32: map[string][]int32{}}
	for _, in := range inputs {
		s.int32s[in] = m.Graph.Types[in] == model.ElemInt32
	}
	if s.cpu {
		// Loading freed memory too (the graph's parse, initializers): it
		// goes back with the idle trim, a second after the last session
		// opens, unless runs begin first.
		cpuRuns.begin()
		cpuRuns.end()
	}
	return s, nil
}

func sessionOptions(p Provider, inputs []string) (*ort.SessionOptions, error) {
	so, err := ort.NewSessionOptions()
	if err != nil {
		return nil, fmt.Errorf("ort: session options: %w", err)
	}
	if err := configure(so, p, inputs); err != nil {
		return nil, errors.Join(err, so.Destroy())
	}
	return so, nil
}

func configure(so *ort.SessionOptions, p Provider, inputs []string) error {
	if p.IntraOpThreads > 0 {
		if err := so.SetIntraOpNumThreads(p.IntraOpThreads); err != nil {
			return fmt.Errorf("ort: intra-op threads: %w", err)
		}
	}
	if p.InterOpThreads > 0 {
		if err := so.SetInterOpNumThreads(p.InterOpThreads); err != nil {
			return fmt.Errorf("ort: inter-op threads: %w", err)
		}
	}
	if p.kind() == CPU && !p.CPUArena {
		if err := so.SetCpuMemArena(false); err != nil {
			return fmt.Errorf("ort: cpu arena: %w", err)
		}
		if err := so.SetMemPattern(false); err != nil {
			return fmt.Errorf("ort: memory pattern: %w", err)
		}
	}
	switch p.kind() {
	case TensorRT:
		if err := appendTensorRT(so, p, inputs); err != nil {
			return err
		}
		// CUDA takes the nodes TensorRT rejects; without it they would
		// run on the CPU.
		fallthrough
	case CUDA:
		if err := appendCUDA(so, p); err != nil {
			return err
		}
	}
	return nil
}

func appendCUDA(so *ort.SessionOptions, p Provider) error {
	fail := func(err error) error { return fmt.Errorf("%w: cuda (device %d): %w", ErrProvider, p.DeviceID, err) }
	o, err := ort.NewCUDAProviderOptions()
	if err != nil {
		return fail(err)
	}
	defer o.Destroy()
	if err := o.Update(p.cudaOptions()); err != nil {
		return fail(err)
	}
	if err := so.AppendExecutionProviderCUDA(o); err != nil {
		return fail(err)
	}
	return nil
}

func appendTensorRT(so *ort.SessionOptions, p Provider, inputs []string) error {
	fail := func(err error) error { return fmt.Errorf("%w: tensorrt (device %d): %w", ErrProvider, p.DeviceID, err) }
	o, err := ort.NewTensorRTProviderOptions()
	if err != nil {
		return fail(err)
	}
	defer o.Destroy()
	if err := o.Update(p.tensorRTOptions(inputs...)); err != nil {
		return fail(err)
	}
	if err := so.AppendExecutionProviderTensorRT(o); err != nil {
		return fail(err)
	}
	return nil
}

// Run runs one padded chunk. It checks ctx before starting; a cancellation
// during the run sets ONNX Runtime's terminate flag, which is only checked
// between graph nodes, so a run may still take up to one node's time to
// stop (GPU kernels already queued finish).
func (s *Session) Run(ctx context.Context, in engine.RunInput) (out engine.RunOutput, err error) {
	if s.sess == nil {
		return out, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return out, err
	}
	if in.Batch < 1 || in.Seq < 1 || len(in.IDs) != in.Batch*in.Seq || len(in.Mask) != len(in.IDs) {
		return out, fmt.Errorf("%w: batch %d x seq %d with %d ids and %d mask values",
			ErrInput, in.Batch, in.Seq, len(in.IDs), len(in.Mask))
	}
	b, sq := int64(in.Batch), int64(in.Seq)
	// The tensors wrap the caller's slices and Go-allocated outputs: ONNX
	// Runtime reads and writes them in place, without copies.
	nin := len(s.inputs)
	values := make([]ort.Value, nin+s.outputs)
	defer func() {
		for _, v := range values {
			if v != nil {
				err = errors.Join(err, v.Destroy())
			}
		}
	}()
	for i, name := range s.inputs {
		if values[i], err = s.input(name, in); err != nil {
			return out, fmt.Errorf("ort: %s tensor: %w", name, err)
		}
	}
	out.Dim = s.dim
	switch s.layout {
	case model.LayoutHidden:
		out.Hidden = make([]float32, in.Batch*in.Seq*s.dim)
		if values[nin], err = ort.NewTensor(ort.NewShape(b, sq, int64(s.dim)), out.Hidden); err != nil {
			return out, fmt.Errorf("ort: %s tensor: %w", model.OutputHidden, err)
		}
	case model.LayoutHeads:
		out.Dense = make([]float32, in.Batch*s.dim)
		if values[nin], err = ort.NewTensor(ort.NewShape(b, int64(s.dim)), out.Dense); err != nil {
			return out, fmt.Errorf("ort: %s tensor: %w", model.OutputDense, err)
		}
		// sparse_vecs and colbert_vecs are left to ORT to allocate: their
		// exact shapes ([B,S,1] or [B,S]; S-1 rows) differ between exports.
	}
	if s.cpu {
		cpuRuns.begin()
		defer cpuRuns.end()
	}
	if err := s.run(ctx, values[:nin], values[nin:]); err != nil {
		return engine.RunOutput{}, err
	}
	if s.layout == model.LayoutHeads {
		if out, err = headsOutput(out, values[nin+1], values[nin+2], in.Batch, in.Seq); err != nil {
			return engine.RunOutput{}, err
		}
	}
	return out, nil
}

// input is the tensor of one graph input for a chunk: the ids and the
// mask as given; token types all zero (one segment); position ids as the
// model type computes them. The ids and the mask are wrapped, not copied,
// unless the graph declares int32.
func (s *Session) input(name string, in engine.RunInput) (ort.Value, error) {
	shape := ort.NewShape(int64(in.Batch), int64(in.Seq))
	var v []int64
	switch name {
	case model.InputIDs:
		v = in.IDs
	case model.InputMask:
		v = in.Mask
	case model.InputTokenType:
		v = grow(s.feeds, name, len(in.IDs))
		clear(v)
	case model.InputPositions:
		v = grow(s.feeds, name, len(in.IDs))
		s.config.PositionIDs(v, in.IDs, in.Seq)
	default:
		return nil, fmt.Errorf("%w: the graph input %q has no feed", ErrInput, name)
	}
	if s.int32s[name] {
		v32 := grow(s.feeds32, name, len(v))
		for i, x := range v {
			v32[i] = int32(x)
		}
		return ort.NewTensor(shape, v32)
	}
	return ort.NewTensor(shape, v)
}

// grow returns bufs[name] resized to n, reallocated only to grow.
func grow[T int32 | int64](bufs map[string][]T, name string, n int) []T {
	b := bufs[name]
	if cap(b) < n {
		b = make([]T, n)
	}
	bufs[name] = b[:n]
	return b[:n]
}

// run calls ORT with ctx wired to the terminate flag.
func (s *Session) run(ctx context.Context, inputs, outputs []ort.Value) error {
	if ctx.Done() == nil {
		if err := s.sess.Run(inputs, outputs); err != nil {
			return fmt.Errorf("ort: run: %w", err)
		}
		return nil
	}
	if err := s.runOpts.UnsetTerminate(); err != nil {
		return fmt.Errorf("ort: run options: %w", err)
	}
	terminated := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = s.runOpts.Terminate()
		close(terminated)
	})
	err := s.sess.RunWithOptions(inputs, outputs, s.runOpts)
	if !stop() && ctx.Err() != nil {
		<-terminated
		if err != nil {
			return fmt.Errorf("ort: run: %w: %w", ctx.Err(), err)
		}
	}
	if err != nil {
		return fmt.Errorf("ort: run: %w", err)
	}
	return nil
}

// headsOutput takes the ORT-allocated sparse and colbert outputs (Go memory,
// so they outlive the native tensors) and checks their shapes.
func headsOutput(out engine.RunOutput, sparse, colbert ort.Value, batch, seq int) (engine.RunOutput, error) {
	sp, ok := sparse.(*ort.Tensor[float32])
	if !ok {
		return out, fmt.Errorf("ort: %s is %T, want a float32 tensor", model.OutputSparse, sparse)
	}
	if n := len(sp.GetData()); n != batch*seq {
		return out, fmt.Errorf("ort: %s shape %v, want [%d %d 1]", model.OutputSparse, sp.GetShape(), batch, seq)
	}
	out.Sparse = sp.GetData()
	cb, ok := colbert.(*ort.Tensor[float32])
	if !ok {
		return out, fmt.Errorf("ort: %s is %T, want a float32 tensor", model.OutputColBERT, colbert)
	}
	shape := cb.GetShape()
	if len(shape) != 3 || shape[0] != int64(batch) || shape[1] > int64(seq) {
		return out, fmt.Errorf("ort: %s shape %v, want [%d <=%d C]", model.OutputColBERT, shape, batch, seq)
	}
	out.ColBERT = cb.GetData()
	out.ColBERTLen, out.ColBERTDim = int(shape[1]), int(shape[2])
	return out, nil
}

// Attention reports how the session computes attention.
func (s *Session) Attention() AttentionPlan { return s.plan }

// Close frees the native session. It is idempotent.
func (s *Session) Close() error {
	if s.sess == nil {
		return nil
	}
	err := errors.Join(s.sess.Destroy(), s.runOpts.Destroy())
	s.sess, s.runOpts = nil, nil
	return err
}
