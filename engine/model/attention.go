package model

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// AttentionTarget is the execution provider a rewrite is for: the padding
// form that keeps its fast kernels differs.
type AttentionTarget int

const (
	// AttentionCPU folds the padding into one extra query/key column per
	// head, so a padded chunk runs MultiHeadAttention without a
	// key_padding_mask: MLAS's flash kernel needs none.
	AttentionCPU AttentionTarget = iota
	// AttentionCUDA runs a chunk without padding with no mask (CUDA's
	// flash and memory-efficient kernels) and a padded one with a 1-D
	// key-length mask, chosen per chunk by an If on the attention_mask.
	AttentionCUDA
)

func (t AttentionTarget) String() string {
	if t == AttentionCUDA {
		return "cuda"
	}
	return "cpu"
}

// AttentionRewrite is a model whose attention blocks were replaced by ONNX
// Runtime's com.microsoft.MultiHeadAttention, which computes attention
// without materializing the heads×S×S scores.
type AttentionRewrite struct {
	// ONNX is the rewritten ModelProto. Its initializers are the
	// original's, inline or external; external data stays where it is.
	ONNX []byte
	// DataDir is the directory external data locations are relative to
	// (the original model file's); the session must be told it, since the
	// model is loaded from memory.
	DataDir string
	// Fused is the number of attention blocks replaced, of Blocks softmax
	// nodes seen; Missed says why the others were not (one line each).
	Fused, Blocks int
	Missed        []string
}

// ErrNoAttention reports a graph with no attention block the rewrite
// recognizes; it runs as it is.
var ErrNoAttention = errors.New("model: no attention block recognized")

// mhaDomain is the operator set of ONNX Runtime's contrib ops.
const mhaDomain = "com.microsoft"

// maskedScore is the score a padding key gets in the folded form: exp of
// it underflows to 0 like the graphs' own -1e4, -1e9 or float32 min.
const maskedScore = -1e9

// RewriteAttention reads the ONNX model at path and replaces every
// attention block it recognizes (see attnBlock: our generator's graphs,
// Hugging Face's eager XLMRobertaSelfAttention and SDPA exports) with a
// MultiHeadAttention node for target, pruning what only the old blocks
// used (scores, the extended mask). A graph with none fails with
// [ErrNoAttention] and the reasons; a partly recognized one is rewritten
// where it can be, and Missed says where not.
func RewriteAttention(path string, target AttentionTarget) (*AttentionRewrite, error) {
	f, err := readONNXFile(path)
	if err != nil {
		return nil, err
	}
	res, nodes, e, err := fuseAttention(f, target)
	if err != nil {
		return res, err
	}
	if res.ONNX, err = encodeRewrite(f, nodes, e.inits); err != nil {
		return nil, err
	}
	return res, nil
}

// fuseAttention replaces the attention blocks of f's graph and returns the
// new node list (pruned, not yet sorted) and the emitter that wrote it
// (its initializers, its names).
func fuseAttention(f *onnxFile, target AttentionTarget) (*AttentionRewrite, []*pbNode, *emitter, error) {
	path := f.path
	g := newIndex(f)
	res := &AttentionRewrite{DataDir: filepath.Dir(path)}
	if g.opset < 11 {
		return nil, nil, nil, fmt.Errorf("%w: %s: opset %d (the rewrite emits opset 11+ ops)", ErrNoAttention, path, g.opset)
	}
	if v, ok := f.opsets[mhaDomain]; ok && v != 1 {
		return nil, nil, nil, fmt.Errorf("%w: %s: com.microsoft opset %d (MultiHeadAttention is in version 1)", ErrNoAttention, path, v)
	}
	e := newEmitter(g)
	replaced := map[int][]*pbNode{}
	var missed []string
	var fused []*pbNode // the softmax nodes of the replaced blocks
	for i, nd := range f.nodes {
		if nd.op != "Softmax" || (nd.domain != "" && nd.domain != "ai.onnx") {
			continue
		}
		res.Blocks++
		b, miss := g.match(i)
		if miss == "" && b.masked && !g.hasMaskInput() {
			miss = "the graph has no attention_mask input to fold the padding from"
		}
		if miss == "" && b.dtype != dtFloat && b.dtype != dtFloat16 {
			miss = missf("attention in element type %d (want float or float16)", b.dtype)
		}
		if miss != "" {
			missed = append(missed, fmt.Sprintf("softmax %s: %s", nodeName(nd, i), miss))
			continue
		}
		if _, dup := replaced[b.outNode]; dup {
			continue
		}
		replaced[b.outNode] = e.block(b, target)
		fused = append(fused, nd)
		res.Fused++
	}
	res.Missed = missed
	if res.Fused == 0 {
		why := "no Softmax node"
		if len(missed) > 0 {
			why = missed[0]
			if len(missed) > 1 {
				why += fmt.Sprintf(" (and %d more)", len(missed)-1)
			}
		}
		return res, nil, nil, fmt.Errorf("%w: %s: %s", ErrNoAttention, path, why)
	}

	var nodes []*pbNode
	for i, nd := range f.nodes {
		if r, ok := replaced[i]; ok {
			nodes = append(nodes, e.take(r)...)
			continue
		}
		nodes = append(nodes, nd)
	}
	nodes = e.prepend(nodes)
	nodes = prune(nodes, f.outputs)
	for _, sm := range fused {
		if slices.Contains(nodes, sm) {
			// Something else still reads the scores or probabilities: the
			// block is computed twice, and its S×S memory stays.
			res.Fused--
			res.Missed = append(res.Missed, fmt.Sprintf("softmax %s: its scores are read outside the block", nodeName(sm, -1)))
		}
	}
	if res.Fused == 0 {
		return res, nil, nil, fmt.Errorf("%w: %s: %s", ErrNoAttention, path, res.Missed[0])
	}
	return res, nodes, e, nil
}

// encodeRewrite sorts nodes and writes the model with them, the
// initializers they still read and extra, declaring the com.microsoft
// operator set the rewrites emit.
func encodeRewrite(f *onnxFile, nodes []*pbNode, extra []*pbTensor) ([]byte, error) {
	nodes, err := topoSort(nodes)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, f.path, err)
	}
	used := usedNames(nodes, f)
	keep := func(t *pbTensor) bool { return used[t.name] }
	opsets := map[string]int64{}
	for d, v := range f.opsets {
		opsets[d] = v
	}
	opsets[mhaDomain] = 1
	b, err := f.encodeModel(nodes, keep, extra, opsets)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, f.path, err)
	}
	return b, nil
}

func nodeName(nd *pbNode, i int) string {
	if nd.name != "" {
		return nd.name
	}
	return fmt.Sprintf("#%d", i)
}

func (g *graphIndex) hasMaskInput() bool {
	_, ok := g.inputs[InputMask]
	return ok
}

// prune drops the nodes none of whose outputs reaches a graph output.
func prune(nodes []*pbNode, outputs []string) []*pbNode {
	need := map[string]bool{}
	for _, o := range outputs {
		need[o] = true
	}
	live := make([]bool, len(nodes))
	for changed := true; changed; {
		changed = false
		for i := len(nodes) - 1; i >= 0; i-- {
			if live[i] {
				continue
			}
			for _, o := range nodes[i].outputs {
				if need[o] {
					live[i], changed = true, true
					break
				}
			}
			if live[i] {
				for _, in := range nodes[i].inputs {
					need[in] = true
				}
				for _, in := range nodes[i].subInputs {
					need[in] = true
				}
			}
		}
	}
	out := nodes[:0:0]
	for i, nd := range nodes {
		if live[i] {
			out = append(out, nd)
		}
	}
	return out
}

// topoSort orders the nodes so each comes after the producers of its
// inputs, keeping the file's order where it already is.
func topoSort(nodes []*pbNode) ([]*pbNode, error) {
	producer := map[string]int{}
	for i, nd := range nodes {
		for _, o := range nd.outputs {
			if o != "" {
				producer[o] = i
			}
		}
	}
	state := make([]uint8, len(nodes)) // 0 new, 1 visiting, 2 done
	out := make([]*pbNode, 0, len(nodes))
	var visit func(i int) error
	visit = func(i int) error {
		switch state[i] {
		case 1:
			return fmt.Errorf("cycle through node %q", nodes[i].name)
		case 2:
			return nil
		}
		state[i] = 1
		for _, in := range append(append([]string{}, nodes[i].inputs...), nodes[i].subInputs...) {
			if p, ok := producer[in]; ok && p != i {
				if err := visit(p); err != nil {
					return err
				}
			}
		}
		state[i] = 2
		out = append(out, nodes[i])
		return nil
	}
	for i := range nodes {
		if err := visit(i); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// usedNames are the values the nodes read, and the graph's inputs and
// outputs: the initializers to keep.
func usedNames(nodes []*pbNode, f *onnxFile) map[string]bool {
	used := map[string]bool{}
	for _, nd := range nodes {
		for _, in := range nd.inputs {
			used[in] = true
		}
		for _, in := range nd.subInputs {
			used[in] = true
		}
	}
	for _, in := range f.inputs {
		used[in.name] = true
	}
	for _, o := range f.outputs {
		used[o] = true
	}
	return used
}

// AttentionSummary is one line for the start-up log.
func (r *AttentionRewrite) AttentionSummary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d attention blocks fused", r.Fused, r.Blocks)
	if len(r.Missed) > 0 {
		fmt.Fprintf(&b, "; not %s", r.Missed[0])
		if len(r.Missed) > 1 {
			fmt.Fprintf(&b, " (and %d more)", len(r.Missed)-1)
		}
	}
	return b.String()
}
