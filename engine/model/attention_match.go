package model

import (
	"fmt"
	"math"
	"slices"
)

// attnBlock is one attention subgraph the matcher recognized:
//
//	scores = MatMul(Q·a, Kᵀ·b)·c  [+ mask | Where(mask, …)]
//	out    = Reshape(Transpose(MatMul(Softmax(scores), V)))
//
// with Q, Kᵀ and V split into heads by a Reshape to [B, S, N, d] and a
// Transpose, and a, b, c scalar factors (Mul or Div) whose product is the
// scale. It is replaced by one MultiHeadAttention node fed the [B, S, N·d]
// tensors before the split.
type attnBlock struct {
	q4, k4, v4 string // the [B, S, N, d] Reshape outputs
	heads      int64
	headSize   int64
	vHeadSize  int64
	scale      float64
	masked     bool   // the scores had a padding mask
	out        string // the block's output, [B, S, N·dv] after the final Reshape
	outRank    int    // 3, or 2 for [B·S, N·dv]
	outNode    int    // that Reshape
	dtype      int32  // element type of Q, K, V (float or float16)
}

// blockMiss is why a Softmax is not a recognized attention block.
type blockMiss string

func missf(format string, args ...any) blockMiss { return blockMiss(fmt.Sprintf(format, args...)) }

// match tries the Softmax node sm.
func (g *graphIndex) match(sm int) (*attnBlock, blockMiss) {
	nd := g.f.nodes[sm]
	axis := nd.intAttr("axis", -1)
	if g.opset < 13 {
		axis = nd.intAttr("axis", 1)
	}
	if axis != -1 && axis != 3 {
		return nil, missf("softmax over axis %d, not the last of [B, N, S, S]", axis)
	}
	b := &attnBlock{scale: 1}

	// Scores: mask, then scale factors, then the MatMul of Q and Kᵀ.
	scores, miss := g.unmask(nd.input(0), b)
	if miss != "" {
		return nil, miss
	}
	scores, f := g.peelScale(scores)
	b.scale *= f
	mm := g.node(scores)
	if mm == nil || mm.op != "MatMul" || !g.only(scores) {
		return nil, "the scores are not a MatMul of the queries and keys"
	}
	qs, f := g.peelScale(mm.input(0))
	b.scale *= f
	ks, f := g.peelScale(mm.input(1))
	b.scale *= f
	var qd, kd [2]int64
	var ok bool
	if b.q4, qd, ok = g.splitHeads(qs, 0, 2, 1, 3); !ok {
		return nil, "the queries are not split into heads by Reshape [B, S, N, d] and Transpose (0, 2, 1, 3)"
	}
	if b.k4, kd, ok = g.splitKeys(ks); !ok {
		return nil, "the transposed keys are not Reshape [B, S, N, d] and Transpose (0, 2, 3, 1), or (0, 2, 1, 3) then (0, 1, 3, 2)"
	}
	if qd != kd {
		return nil, missf("queries of %d heads of %d and keys of %d heads of %d", qd[0], qd[1], kd[0], kd[1])
	}
	b.heads, b.headSize = qd[0], qd[1]

	// Probabilities times V, back to [B, S, N·dv].
	probs := nd.outputs[0]
	pv, miss := g.consumerThrough(probs, "MatMul", "Dropout", "Identity")
	if miss != "" {
		return nil, miss
	}
	if g.reaches(g.f.nodes[pv].input(0), probs) {
		var vd [2]int64
		if b.v4, vd, ok = g.splitHeads(g.f.nodes[pv].input(1), 0, 2, 1, 3); !ok {
			return nil, "the values are not split into heads by Reshape [B, S, N, d] and Transpose (0, 2, 1, 3)"
		}
		if vd[0] != b.heads {
			return nil, missf("values of %d heads, queries of %d", vd[0], b.heads)
		}
		b.vHeadSize = vd[1]
	} else {
		return nil, "the probabilities are not the left operand of the MatMul with the values"
	}
	ctx := g.f.nodes[pv].outputs[0]
	tr, miss := g.consumerThrough(ctx, "Transpose")
	if miss != "" {
		return nil, "the context is not transposed back"
	}
	if p := transposePerm(g.f.nodes[tr], 4); !slices.Equal(p, []int64{0, 2, 1, 3}) {
		return nil, missf("the context is transposed by %v, not (0, 2, 1, 3)", p)
	}
	rs, miss := g.consumerThrough(g.f.nodes[tr].outputs[0], "Reshape")
	if miss != "" {
		return nil, "the context is not reshaped to [B, S, N·d]"
	}
	sh, ok := g.eval(g.f.nodes[rs].input(1))
	if !ok || len(sh.vals) < 2 || len(sh.vals) > 3 {
		return nil, "the context is not reshaped to [B, S, N·d] or [B·S, N·d]"
	}
	if last := len(sh.vals) - 1; sh.known[last] && sh.vals[last] != -1 && int64(sh.vals[last]) != b.heads*b.vHeadSize {
		return nil, missf("the context is reshaped to a last axis of %v, not %d", sh.vals[last], b.heads*b.vHeadSize)
	}
	b.outRank = len(sh.vals)
	b.outNode = rs
	b.out = g.f.nodes[rs].outputs[0]
	if b.scale <= 0 || math.IsNaN(b.scale) || math.IsInf(b.scale, 0) {
		return nil, missf("scale %g", b.scale)
	}
	b.dtype = g.floatType(b.q4)
	return b, ""
}

// unmask takes the padding mask off the softmax input: Add(scores, mask)
// or Where(mask, scores, fill) with the mask computed from attention_mask
// alone. Without either, the scores are the input itself.
func (g *graphIndex) unmask(x string, b *attnBlock) (string, blockMiss) {
	nd := g.node(x)
	if nd == nil || !g.only(x) {
		return x, ""
	}
	switch nd.op {
	case "Add":
		for i := range 2 {
			s, m := nd.input(i), nd.input(1-i)
			if !g.scoresLike(s) {
				continue
			}
			if miss := g.paddingMask(m); miss != "" {
				return "", miss
			}
			b.masked = true
			return s, ""
		}
	case "Where":
		for i := 1; i <= 2; i++ {
			s, fill := nd.input(i), nd.input(3-i)
			if !g.scoresLike(s) {
				continue
			}
			if c, ok := g.eval(fill); !ok || len(c.vals) != 1 {
				return "", "a Where on the scores whose fill is not a constant"
			}
			if miss := g.paddingMask(nd.input(0)); miss != "" {
				return "", miss
			}
			b.masked = true
			return s, ""
		}
	}
	return x, ""
}

// scoresLike reports whether x is a MatMul, possibly scaled.
func (g *graphIndex) scoresLike(x string) bool {
	x, _ = g.peelScale(x)
	nd := g.node(x)
	return nd != nil && nd.op == "MatMul"
}

// paddingMask checks that m is computed from the attention_mask input and
// constants only: no other input, no weights (a learned bias), no hidden
// state. What it computes is left to the canary, which compares the
// rewritten graph with this one on padded batches.
func (g *graphIndex) paddingMask(m string) blockMiss {
	seen := map[string]bool{}
	usesMask := false
	stack := []string{m}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if x == "" || seen[x] {
			continue
		}
		seen[x] = true
		if len(seen) > 256 {
			return "the mask is computed by a subgraph of more than 256 values"
		}
		if t, ok := g.inits[x]; ok {
			if n := numel(t.dims); n < 0 || n > 16 {
				return missf("the mask depends on the initializer %s of %v", x, t.dims)
			}
			continue
		}
		if _, ok := g.inputs[x]; ok {
			if x != InputMask {
				return missf("the mask depends on the input %s", x)
			}
			usesMask = true
			continue
		}
		nd := g.node(x)
		if nd == nil {
			return missf("the mask depends on %s, which no node of the default domain computes", x)
		}
		switch nd.op {
		case "MatMul", "Gemm", "Softmax", "LayerNormalization":
			return missf("the mask depends on a %s", nd.op)
		case "Shape", "Size":
			continue // a shape is no data: [B, 1, S, S] masks take S from input_ids
		}
		stack = append(stack, nd.inputs...)
	}
	if !usesMask {
		return "the mask does not depend on the attention_mask input"
	}
	return ""
}

// peelScale walks back over Mul and Div by scalar constants and returns
// the tensor before them and the product of the factors.
func (g *graphIndex) peelScale(x string) (string, float64) {
	f := 1.0
	for range 8 {
		nd := g.node(x)
		if nd == nil || (nd.op != "Mul" && nd.op != "Div") || !g.only(x) {
			break
		}
		if c, ok := g.evalScalar(nd.input(1)); ok {
			if nd.op == "Div" {
				f /= c
			} else {
				f *= c
			}
			x = nd.input(0)
			continue
		}
		if c, ok := g.evalScalar(nd.input(0)); ok && nd.op == "Mul" {
			f *= c
			x = nd.input(1)
			continue
		}
		break
	}
	return x, f
}

func (g *graphIndex) evalScalar(x string) (float64, bool) {
	c, ok := g.eval(x)
	if !ok {
		return 0, false
	}
	return c.scalar()
}

// splitHeads matches Transpose(perm)(Reshape(t, [B, S, N, d])) at x and
// returns the Reshape's output and (N, d).
func (g *graphIndex) splitHeads(x string, perm ...int64) (string, [2]int64, bool) {
	tr := g.node(x)
	if tr == nil || tr.op != "Transpose" || !slices.Equal(transposePerm(tr, 4), perm) {
		return "", [2]int64{}, false
	}
	r4 := tr.input(0)
	rs := g.node(r4)
	if rs == nil || rs.op != "Reshape" {
		return "", [2]int64{}, false
	}
	nd, ok := g.headDims(rs)
	return r4, nd, ok
}

// splitKeys matches the transposed keys: Transpose (0, 2, 3, 1) of the
// split, or Transpose (0, 1, 3, 2) of the (0, 2, 1, 3) split (HF eager and
// SDPA exports), with scale factors peeled between.
func (g *graphIndex) splitKeys(x string) (string, [2]int64, bool) {
	if k4, d, ok := g.splitHeads(x, 0, 2, 3, 1); ok {
		return k4, d, true
	}
	tr := g.node(x)
	if tr == nil || tr.op != "Transpose" || !slices.Equal(transposePerm(tr, 4), []int64{0, 1, 3, 2}) || !g.only(x) {
		return "", [2]int64{}, false
	}
	inner, _ := g.peelScale(tr.input(0))
	return g.splitHeads(inner, 0, 2, 1, 3)
}

// headDims reads (N, d) from a Reshape to [B, S, N, d]. One of them may be
// -1 when the input's last axis says the other.
func (g *graphIndex) headDims(rs *pbNode) ([2]int64, bool) {
	sh, ok := g.eval(rs.input(1))
	if !ok || len(sh.vals) != 4 {
		return [2]int64{}, false
	}
	n, d := int64(-1), int64(-1)
	if sh.known[2] {
		n = int64(sh.vals[2])
	}
	if sh.known[3] {
		d = int64(sh.vals[3])
	}
	if n <= 0 || d <= 0 {
		full := g.lastDim(rs.input(0))
		switch {
		case n > 0 && d == -1 && full > 0 && full%n == 0:
			d = full / n
		case d > 0 && n == -1 && full > 0 && full%d == 0:
			n = full / d
		}
	}
	if n <= 0 || d <= 0 {
		return [2]int64{}, false
	}
	return [2]int64{n, d}, true
}

// only reports whether x has one consumer and is no graph output, so the
// rewrite may drop what computes it.
func (g *graphIndex) only(x string) bool {
	return len(g.consumers[x]) == 1 && !slices.Contains(g.f.outputs, x)
}

// soleUse returns x's one consumer but Shape nodes (which read no data:
// what they feed is rebuilt or pruned), when x is no graph output.
func (g *graphIndex) soleUse(x string) (int, bool) {
	if slices.Contains(g.f.outputs, x) {
		return 0, false
	}
	use := -1
	for _, i := range g.consumers[x] {
		if g.f.nodes[i].op == "Shape" && g.f.nodes[i].domain == "" {
			continue
		}
		if use >= 0 {
			return 0, false
		}
		use = i
	}
	return use, use >= 0
}

// consumerThrough follows x's single consumer through pass-through ops
// (Dropout, Identity) to an op of kind op, and returns that node.
func (g *graphIndex) consumerThrough(x, op string, through ...string) (int, blockMiss) {
	for range 4 {
		i, ok := g.soleUse(x)
		if !ok {
			return 0, missf("%s has other consumers", x)
		}
		nd := g.f.nodes[i]
		if nd.domain != "" && nd.domain != "ai.onnx" {
			return 0, missf("%s feeds a %s.%s", x, nd.domain, nd.op)
		}
		if nd.op == op {
			return i, ""
		}
		if !slices.Contains(through, nd.op) || len(nd.outputs) == 0 {
			return 0, missf("%s feeds a %s, not a %s", x, nd.op, op)
		}
		if nd.op == "Dropout" && len(nd.outputs) > 1 && nd.outputs[1] != "" && len(g.consumers[nd.outputs[1]]) > 0 {
			return 0, "the dropout mask is used"
		}
		x = nd.outputs[0]
	}
	return 0, missf("%s reaches no %s", x, op)
}

// reaches reports whether y is x or reached from x back through
// pass-through ops.
func (g *graphIndex) reaches(x, y string) bool {
	for range 4 {
		if x == y {
			return true
		}
		nd := g.node(x)
		if nd == nil || (nd.op != "Dropout" && nd.op != "Identity") {
			return false
		}
		x = nd.input(0)
	}
	return false
}

// floatType is the element type of x (float or float16), found from value
// infos, Casts and the initializers it is computed from; float when
// unknown.
func (g *graphIndex) floatType(x string) int32 {
	for range 16 {
		if vi, ok := g.f.valueInfo[x]; ok && vi.elem != 0 {
			return vi.elem
		}
		if vi, ok := g.inputs[x]; ok && vi.elem != 0 {
			return vi.elem
		}
		if t, ok := g.inits[x]; ok {
			return t.dtype
		}
		nd := g.node(x)
		if nd == nil {
			return dtFloat
		}
		switch nd.op {
		case "Cast":
			return int32(nd.intAttr("to", dtFloat))
		case "Reshape", "Transpose", "Identity":
			x = nd.input(0)
		case "Add", "MatMul", "Mul", "Sub", "Div":
			// The weight side states the type when the activation does not.
			if t, ok := g.inits[nd.input(1)]; ok {
				return t.dtype
			}
			x = nd.input(0)
		default:
			return dtFloat
		}
	}
	return dtFloat
}
