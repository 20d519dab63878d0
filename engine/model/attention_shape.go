package model

// Shapes: what the matcher and the evaluator know of a value's dims, from
// value infos, initializers and the ops that move dims (Reshape,
// Transpose, elementwise ops, MatMul).

// shapeOf returns name's dims (-1 where unknown) and whether its rank is
// known.
func (g *graphIndex) shapeOf(name string) ([]int64, bool) {
	if d, ok := g.shapeMemo[name]; ok {
		return d, d != nil
	}
	g.shapeMemo[name] = nil
	d := g.shapeUncached(name)
	g.shapeMemo[name] = d
	return d, d != nil
}

func (g *graphIndex) shapeUncached(name string) []int64 {
	if t, ok := g.inits[name]; ok {
		return append([]int64{}, t.dims...)
	}
	if vi, ok := g.f.valueInfo[name]; ok && vi.hasShape {
		return append([]int64{}, vi.dims...)
	}
	nd := g.node(name)
	if nd == nil {
		return nil
	}
	if len(nd.outputs) == 0 || nd.outputs[0] != name {
		return nil
	}
	switch nd.op {
	case "Constant":
		if c := constantVal(nd); c != nil {
			return append([]int64{}, c.dims...)
		}
	case "Reshape":
		sh, ok := g.eval(nd.input(1))
		if !ok || len(sh.dims) != 1 {
			return nil
		}
		in, inOK := g.shapeOf(nd.input(0))
		out := make([]int64, len(sh.vals))
		for i, v := range sh.vals {
			switch {
			case !sh.known[i] || v < 0:
				out[i] = -1
			case v == 0 && nd.intAttr("allowzero", 0) == 0:
				out[i] = -1
				if inOK && i < len(in) {
					out[i] = in[i]
				}
			default:
				out[i] = int64(v)
			}
		}
		return out
	case "Transpose":
		in, ok := g.shapeOf(nd.input(0))
		if !ok {
			return nil
		}
		perm := transposePerm(nd, len(in))
		if perm == nil {
			return nil
		}
		out := make([]int64, len(in))
		for i, p := range perm {
			out[i] = in[p]
		}
		return out
	case "Cast", "Identity", "Dropout", "Sqrt", "Neg", "Relu", "Softmax", "Erf", "Tanh", "Sigmoid", "LayerNormalization":
		return g.shapeCopy(nd.input(0))
	case "Add", "Sub", "Mul", "Div", "Pow", "Where":
		ins := nd.inputs
		if nd.op == "Where" {
			ins = ins[1:]
		}
		var best []int64
		for _, in := range ins {
			d, ok := g.shapeOf(in)
			if !ok {
				if c, ok := g.eval(in); ok && len(c.vals) == 1 {
					continue // a scalar broadcasts
				}
				return nil
			}
			if numel(d) == 1 && len(d) <= 1 {
				continue
			}
			if best == nil || len(d) > len(best) {
				best = d
			}
		}
		return best
	case "MatMul":
		a, okA := g.shapeOf(nd.input(0))
		b, okB := g.shapeOf(nd.input(1))
		if !okA || !okB || len(a) < 2 || len(b) < 2 {
			return nil
		}
		out := append([]int64{}, a[:len(a)-1]...)
		if len(b) > len(a) {
			out = append(append([]int64{}, b[:len(b)-2]...), a[len(a)-2])
		}
		return append(out, b[len(b)-1])
	}
	return nil
}

func (g *graphIndex) shapeCopy(name string) []int64 {
	d, ok := g.shapeOf(name)
	if !ok {
		return nil
	}
	return append([]int64{}, d...)
}

// transposePerm returns a Transpose's permutation for a rank-r input.
func transposePerm(nd *pbNode, r int) []int64 {
	a, ok := nd.attr("perm")
	if !ok {
		if r < 0 {
			return nil
		}
		p := make([]int64, r)
		for i := range p {
			p[i] = int64(r - 1 - i)
		}
		return p
	}
	if r >= 0 && len(a.ints) != r {
		return nil
	}
	return a.ints
}

// lastDim is the size of name's last axis when some producer states it:
// a MatMul by a 2-D weight, through Add of a bias and Casts.
func (g *graphIndex) lastDim(name string) int64 {
	if d, ok := g.shapeOf(name); ok && len(d) > 0 && d[len(d)-1] > 0 {
		return d[len(d)-1]
	}
	nd := g.node(name)
	if nd == nil {
		return -1
	}
	switch nd.op {
	case "Add", "Mul", "Sub", "Div":
		for _, in := range nd.inputs {
			if d := g.lastDim(in); d > 0 {
				return d
			}
		}
	case "Cast", "Identity":
		return g.lastDim(nd.input(0))
	case "MatMul":
		if w, ok := g.shapeOf(nd.input(1)); ok && len(w) == 2 && w[1] > 0 {
			return w[1]
		}
		if w := g.weightDims(nd.input(1)); len(w) == 2 {
			return w[1]
		}
	}
	return -1
}

// weightDims are the dims of an initializer reached through Casts (the
// float16 weights of a model that computes in float32).
func (g *graphIndex) weightDims(name string) []int64 {
	for range 4 {
		if t, ok := g.inits[name]; ok {
			return t.dims
		}
		nd := g.node(name)
		if nd == nil || (nd.op != "Cast" && nd.op != "Identity") {
			return nil
		}
		name = nd.input(0)
	}
	return nil
}
