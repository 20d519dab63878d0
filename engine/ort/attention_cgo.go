//go:build cgo

package ort

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"sync"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/model"
	"github.com/jetembed/jetembed/engine/ort/internal/ctrim"
)

// folderKey is the session option that tells ONNX Runtime where the
// external data of a model loaded from memory lives.
const folderKey = "session.model_external_initializers_file_folder_path"

// l2CacheSize is what ONNX Runtime's CPU MultiHeadAttention checks before
// its flash kernel; tests replace it.
var l2CacheSize = ctrim.L2CacheSize

// rewrite is model.RewriteAttention; tests replace it to break a rewrite.
var rewrite = model.RewriteAttention

// plans caches one AttentionPlan per model file, provider and request, so
// the canary runs once a process however many sessions open.
var plans struct {
	mu sync.Mutex
	m  map[planKey]AttentionPlan
	// spare is the canary's rewritten session, kept for the first Open of
	// the same model and provider: a model of gigabytes then loads twice
	// at start (the graph for the canary, the rewrite), not three times.
	spare map[planKey]spareSession
}

type spareSession struct {
	p Provider
	s *Session
}

type planKey struct {
	path, sha string
	kind      Kind
	device    int
	attention Attention
	precision Precision
}

// PlanAttention decides how sessions of m on p compute attention, once per
// process for a model file and provider: the rewrite into
// MultiHeadAttention where p.Attention and the provider allow it, kept
// only if a canary run through both graphs agrees within
// [CanaryTolerance]. Anything that stops the rewrite leaves the graph as
// it is and says why in the plan's Note (Warn when the operator asked for
// fused or should know). Errors are only those of p or the library.
func PlanAttention(m *model.Model, p Provider) (AttentionPlan, error) {
	if err := p.Validate(); err != nil {
		return AttentionPlan{}, err
	}
	if _, err := Init(LibraryOptions{}); err != nil {
		return AttentionPlan{}, err
	}
	key := p.planKey(m)
	plans.mu.Lock()
	defer plans.mu.Unlock()
	if plan, ok := plans.m[key]; ok {
		return plan, nil
	}
	plan, spare := planAttention(m, p)
	if plans.m == nil {
		plans.m = map[planKey]AttentionPlan{}
		plans.spare = map[planKey]spareSession{}
	}
	plans.m[key] = plan
	if spare != nil {
		plans.spare[key] = spareSession{p: p, s: spare}
	}
	return plan, nil
}

func (p Provider) planKey(m *model.Model) planKey {
	return planKey{path: m.ONNXPath, sha: m.SHA256, kind: p.kind(), device: p.DeviceID, attention: p.Attention.orAuto(), precision: p.Precision.orFP32()}
}

// takeSpare returns the canary's session for m on exactly p, once.
func takeSpare(m *model.Model, p Provider) *Session {
	plans.mu.Lock()
	defer plans.mu.Unlock()
	key := p.planKey(m)
	sp, ok := plans.spare[key]
	if !ok || sp.p != p {
		return nil
	}
	delete(plans.spare, key)
	return sp.s
}

// planAttention decides the plan; with a fused one it returns the
// canary's rewritten session too.
func planAttention(m *model.Model, p Provider) (AttentionPlan, *Session) {
	plan, s := decideAttention(m, p)
	if !plan.Fused && s != nil {
		s.Close()
		s = nil
	}
	plan.Precision, s = decidePrecision(m, p, plan, s)
	return plan, s
}

func decideAttention(m *model.Model, p Provider) (AttentionPlan, *Session) {
	req := p.Attention.orAuto()
	plan := AttentionPlan{Requested: req}
	graph := func(warn bool, format string, args ...any) (AttentionPlan, *Session) {
		plan.Fused, plan.Warn, plan.Note = false, warn, fmt.Sprintf(format, args...)
		return plan, nil
	}
	kind := p.kind()
	switch {
	case req == AttentionGraph:
		return graph(false, "the graph as exported")
	case kind == TensorRT:
		return graph(false, "TensorRT fuses attention itself")
	case kind == CUDA && req == AttentionAuto:
		return graph(false, "auto keeps the graph on cuda; --attention fused rewrites it for ONNX Runtime's CUDA kernels")
	}
	target := model.AttentionCPU
	var flashOff string
	if kind == CUDA {
		target = model.AttentionCUDA
	} else {
		switch l2, known := l2CacheSize(); {
		case flashDisabled():
			flashOff = "ORT_DISABLE_FLASH_ATTENTION is set"
		case known && l2 <= 0:
			flashOff = fmt.Sprintf("the OS reports an L2 cache size of %d (sysconf _SC_LEVEL2_CACHE_SIZE)", l2)
		}
		if flashOff != "" && req == AttentionAuto {
			return graph(true, "ONNX Runtime's CPU flash attention is off (%s), so the rewrite would save nothing: the graph keeps its heads x S x S scores", flashOff)
		}
	}

	rw, err := rewrite(m.ONNXPath, target)
	if rw != nil {
		plan.Blocks, plan.FusedBlocks = rw.Blocks, rw.Fused
	}
	switch {
	case errors.Is(err, model.ErrNoAttention):
		return graph(req == AttentionFused, "the graph as exported (%v)", err)
	case err != nil:
		return graph(true, "the graph as exported: the rewrite failed: %v", err)
	}
	diff, fused, err := canary(m, p, rw)
	plan.CanaryDiff = diff
	switch {
	case err != nil:
		return graph(true, "the graph as exported: the rewritten graph failed its canary run: %v", err)
	case math.IsNaN(diff) || diff > CanaryTolerance:
		fused.Close()
		return graph(true, "the graph as exported: the rewritten graph's canary differs from the graph's by %.3g (over %g), so the rewrite is dropped", diff, CanaryTolerance)
	}
	plan.Fused = true
	kernel := "MLAS flash kernel, padding folded into one extra query/key column per head"
	if target == model.AttentionCUDA {
		kernel = "no mask for chunks without padding, a 1-D key-length mask for padded ones"
	}
	plan.Note = fmt.Sprintf("%s into com.microsoft.MultiHeadAttention (%s); canary max diff %.1e", rw.AttentionSummary(), kernel, diff)
	if flashOff != "" {
		plan.Warn = true
		plan.Note += fmt.Sprintf("; but flash is off (%s): the fused blocks still hold heads x S x S scores", flashOff)
	}
	return plan, fused
}

// openFused opens m's rewritten graph, or takes the canary's.
func openFused(m *model.Model, p Provider) (*Session, error) {
	if s := takeSpare(m, p); s != nil {
		return s, nil
	}
	target := model.AttentionCPU
	if p.kind() == CUDA {
		target = model.AttentionCUDA
	}
	rw, err := rewrite(m.ONNXPath, target)
	if err != nil {
		return nil, fmt.Errorf("ort: %s: attention rewrite: %w", m.ONNXPath, err)
	}
	return openRewrite(m, p, &rw.ONNX, rw.DataDir)
}

// openRewrite opens the rewritten model *onnx, whose external data is
// relative to dir, and drops *onnx once ONNX Runtime has its own copy.
func openRewrite(m *model.Model, p Provider, onnx *[]byte, dir string) (*Session, error) {
	s, err := newSession(m, p, func(so *ort.SessionOptions, inputs, outputs []string) (*ort.DynamicAdvancedSession, error) {
		if err := so.AddSessionConfigEntry(folderKey, dir); err != nil {
			return nil, err
		}
		return ort.NewDynamicAdvancedSessionWithONNXData(*onnx, inputs, outputs, so)
	})
	if len(*onnx) > 32<<20 {
		// The model's inline weights were copied for ONNX Runtime, which
		// has its own copy now.
		*onnx = nil
		debug.FreeOSMemory()
	}
	return s, err
}

// canary runs the same inputs through m's graph and through the rewrite
// (one session at a time, so the weights are in memory once) and returns
// the largest difference of their outputs at real tokens, and the
// rewrite's session (the caller closes it).
func canary(m *model.Model, p Provider, rw *model.AttentionRewrite) (float64, *Session, error) {
	inputs := canaryInputs(m.Config)
	run := func(s *Session, err error, keep bool) ([]engine.RunOutput, error) {
		if err != nil {
			return nil, err
		}
		if !keep {
			defer s.Close()
		}
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
	graph, err := openGraph(m, p)
	want, err := run(graph, err, false)
	if err != nil {
		return 0, nil, fmt.Errorf("graph: %w", err)
	}
	fused, err := openRewrite(m, p, &rw.ONNX, rw.DataDir)
	got, err := run(fused, err, true)
	if err != nil {
		if fused != nil {
			fused.Close()
		}
		return 0, nil, err
	}
	worst := 0.0
	for i, in := range inputs {
		worst = math.Max(worst, outputDiff(want[i], got[i], in))
	}
	return worst, fused, nil
}

// canaryInputs are a chunk of one text and a padded chunk of three, of
// pseudo-random tokens between the special ones.
func canaryInputs(c model.Config) []engine.RunInput {
	longest := 48
	if c.MaxTokens > 0 {
		longest = min(longest, c.MaxTokens)
	}
	longest = max(longest, 2)
	return []engine.RunInput{
		canaryChunk(c, longest, 0x9e3779b97f4a7c15, longest),
		canaryChunk(c, longest, 0x9e3779b97f4a7c15^1, longest, longest/2+1, 3),
	}
}

// canaryChunk is a chunk of seq tokens a row, rows of lens real tokens
// (CLS, pseudo-random ids from seed, EOS) and padding.
func canaryChunk(c model.Config, seq int, seed uint64, lens ...int) engine.RunInput {
	seq = max(seq, 2)
	vocab := int64(max(c.VocabSize, 8))
	in := engine.RunInput{Batch: len(lens), Seq: seq, IDs: make([]int64, len(lens)*seq), Mask: make([]int64, len(lens)*seq)}
	for r, n := range lens {
		n = min(max(n, 2), seq)
		for i := range seq {
			k := r*seq + i
			switch {
			case i >= n:
				in.IDs[k] = int64(c.PadID)
			case i == 0:
				in.IDs[k], in.Mask[k] = int64(c.BOSID), 1
			case i == n-1:
				in.IDs[k], in.Mask[k] = int64(c.EOSID), 1
			default:
				seed = seed*6364136223846793005 + 1442695040888963407
				in.IDs[k], in.Mask[k] = 4+int64(seed>>33)%(vocab-4), 1
			}
		}
	}
	return in
}

// outputDiff is the largest absolute difference of a and b at the real
// tokens of in (padding rows may differ: nothing reads them); NaN where
// one is finite counts as infinite.
func outputDiff(a, b engine.RunOutput, in engine.RunInput) float64 {
	if a.Dim != b.Dim || len(a.Hidden) != len(b.Hidden) || len(a.Dense) != len(b.Dense) || len(a.Sparse) != len(b.Sparse) ||
		a.ColBERTLen != b.ColBERTLen || a.ColBERTDim != b.ColBERTDim || len(a.ColBERT) != len(b.ColBERT) {
		return math.Inf(1)
	}
	worst := 0.0
	cmp := func(x, y []float32) {
		if len(x) != len(y) {
			worst = math.Inf(1)
			return
		}
		for i := range x {
			d := math.Abs(float64(x[i]) - float64(y[i]))
			if math.IsNaN(d) {
				if !(math.IsNaN(float64(x[i])) && math.IsNaN(float64(y[i]))) {
					d = math.Inf(1)
				} else {
					d = 0
				}
			}
			worst = math.Max(worst, d)
		}
	}
	real := func(r, i int) bool { return in.Mask[r*in.Seq+i] != 0 }
	for r := range in.Batch {
		for i := range in.Seq {
			if !real(r, i) {
				continue
			}
			k := r*in.Seq + i
			if a.Hidden != nil {
				cmp(a.Hidden[k*a.Dim:(k+1)*a.Dim], b.Hidden[k*b.Dim:(k+1)*b.Dim])
			}
			if a.Sparse != nil {
				cmp(a.Sparse[k:k+1], b.Sparse[k:k+1])
			}
			if a.ColBERT != nil && i > 0 && i-1 < a.ColBERTLen {
				j := r*a.ColBERTLen + i - 1
				cmp(a.ColBERT[j*a.ColBERTDim:(j+1)*a.ColBERTDim], b.ColBERT[j*b.ColBERTDim:(j+1)*b.ColBERTDim])
			}
		}
		if a.Dense != nil {
			cmp(a.Dense[r*a.Dim:(r+1)*a.Dim], b.Dense[r*b.Dim:(r+1)*b.Dim])
		}
	}
	return worst
}
