package model

import "math"

// The attention matcher needs a few numbers the graph computes rather than
// stores: a Reshape's target shape built from Shape/Gather/Concat, or the
// scale SDPA exports derive from the head size
// (1/sqrt(Cast(Shape(q)[-1]))). graphIndex evaluates such small values
// partially: an element that depends on a dynamic axis (batch, sequence)
// is unknown, the others are computed.

// graphIndex is the node graph of an onnxFile with what the matcher asks
// of it.
type graphIndex struct {
	f         *onnxFile
	producer  map[string]int
	consumers map[string][]int
	inits     map[string]*pbTensor
	inputs    map[string]valueInfo
	opset     int64 // of the ai.onnx domain
	memo      map[string]*cval
	shapeMemo map[string][]int64
}

// cval is a partially known constant: a tensor of dims whose elements are
// vals where known[i].
type cval struct {
	dims  []int64
	vals  []float64
	known []bool
	float bool
}

func (c *cval) allKnown() bool {
	for _, k := range c.known {
		if !k {
			return false
		}
	}
	return true
}

// scalar returns the value of a one-element tensor.
func (c *cval) scalar() (float64, bool) {
	if len(c.vals) != 1 || !c.known[0] {
		return 0, false
	}
	return c.vals[0], true
}

func newIndex(f *onnxFile) *graphIndex {
	g := &graphIndex{
		f: f, producer: map[string]int{}, consumers: map[string][]int{},
		inits: map[string]*pbTensor{}, inputs: map[string]valueInfo{},
		opset: f.opsets[""], memo: map[string]*cval{}, shapeMemo: map[string][]int64{},
	}
	if v, ok := f.opsets["ai.onnx"]; ok && g.opset == 0 {
		g.opset = v
	}
	for _, t := range f.inits {
		g.inits[t.name] = t
	}
	for _, in := range f.inputs {
		g.inputs[in.name] = in
	}
	for i, nd := range f.nodes {
		for _, out := range nd.outputs {
			if out != "" {
				g.producer[out] = i
			}
		}
		for _, in := range nd.inputs {
			if in != "" {
				g.consumers[in] = append(g.consumers[in], i)
			}
		}
	}
	return g
}

// node returns the node producing name in the default domain, if any.
func (g *graphIndex) node(name string) *pbNode {
	i, ok := g.producer[name]
	if !ok {
		return nil
	}
	nd := g.f.nodes[i]
	if nd.domain != "" && nd.domain != "ai.onnx" {
		return nil
	}
	return nd
}

func (nd *pbNode) attr(name string) (pbAttr, bool) {
	for _, a := range nd.attrs {
		if a.name == name {
			return a, true
		}
	}
	return pbAttr{}, false
}

func (nd *pbNode) intAttr(name string, def int64) int64 {
	if a, ok := nd.attr(name); ok {
		return a.i
	}
	return def
}

func (nd *pbNode) input(i int) string {
	if i < len(nd.inputs) {
		return nd.inputs[i]
	}
	return ""
}

// eval evaluates name, or reports false when nothing of it is known.
func (g *graphIndex) eval(name string) (*cval, bool) {
	if name == "" {
		return nil, false
	}
	if c, ok := g.memo[name]; ok {
		return c, c != nil
	}
	g.memo[name] = nil // cycles (invalid graphs) end here
	c := g.evalUncached(name)
	g.memo[name] = c
	return c, c != nil
}

func (g *graphIndex) evalUncached(name string) *cval {
	if t, ok := g.inits[name]; ok {
		return tensorVal(t)
	}
	nd := g.node(name)
	if nd == nil {
		return nil
	}
	switch nd.op {
	case "Constant":
		return constantVal(nd)
	case "Identity":
		c, _ := g.eval(nd.input(0))
		return c
	case "Cast":
		c, ok := g.eval(nd.input(0))
		if !ok {
			return nil
		}
		out := *c
		out.vals = append([]float64(nil), c.vals...)
		switch to := nd.intAttr("to", 0); to {
		case dtFloat, dtDouble, dtFloat16:
			out.float = true
			if to == dtFloat {
				for i, v := range out.vals {
					out.vals[i] = float64(float32(v))
				}
			}
		default:
			out.float = false
			for i, v := range out.vals {
				out.vals[i] = math.Trunc(v)
			}
		}
		return &out
	case "Shape":
		dims, ok := g.shapeOf(nd.input(0))
		if !ok {
			return nil
		}
		r := int64(len(dims))
		start, end := nd.intAttr("start", 0), nd.intAttr("end", r)
		start, end = clampRange(start, r), clampRange(end, r)
		c := &cval{dims: []int64{max(end-start, 0)}}
		for i := start; i < end; i++ {
			c.vals = append(c.vals, float64(dims[i]))
			c.known = append(c.known, dims[i] >= 0)
		}
		return c
	case "Gather":
		return g.evalGather(nd)
	case "Slice":
		return g.evalSlice(nd)
	case "Concat":
		c := &cval{}
		var n int64
		for _, in := range nd.inputs {
			v, ok := g.eval(in)
			if !ok {
				// An unknown part of known length still lets the others count.
				dims, ok := g.shapeOf(in)
				if !ok || len(dims) != 1 || dims[0] < 0 || dims[0] > maxShapeRank {
					return nil
				}
				for range dims[0] {
					c.vals, c.known = append(c.vals, 0), append(c.known, false)
				}
				n += dims[0]
				continue
			}
			if len(v.dims) > 1 {
				return nil
			}
			c.vals, c.known = append(c.vals, v.vals...), append(c.known, v.known...)
			c.float = c.float || v.float
			n += int64(len(v.vals))
		}
		c.dims = []int64{n}
		return c
	case "Unsqueeze", "Squeeze", "Reshape", "Flatten":
		c, ok := g.eval(nd.input(0))
		if !ok {
			return nil
		}
		out := *c
		if len(c.vals) == 1 {
			out.dims = []int64{1}
			if nd.op == "Squeeze" {
				out.dims = nil
			}
		} else {
			out.dims = []int64{int64(len(c.vals))}
		}
		return &out
	case "Sqrt", "Reciprocal", "Neg", "Abs", "Floor", "Ceil", "Exp", "Log":
		c, ok := g.eval(nd.input(0))
		if !ok {
			return nil
		}
		out := *c
		out.vals = make([]float64, len(c.vals))
		for i, v := range c.vals {
			out.vals[i] = unary(nd.op, v)
		}
		return &out
	case "Add", "Sub", "Mul", "Div", "Pow":
		a, ok1 := g.eval(nd.input(0))
		b, ok2 := g.eval(nd.input(1))
		if !ok1 || !ok2 {
			return nil
		}
		return binaryOp(nd.op, a, b)
	}
	return nil
}

// maxShapeRank bounds the shape vectors the evaluator builds from a
// file's claims.
const maxShapeRank = 64

func clampRange(i, r int64) int64 {
	if i < 0 {
		i += r
	}
	return min(max(i, 0), r)
}

func unary(op string, v float64) float64 {
	switch op {
	case "Sqrt":
		return math.Sqrt(v)
	case "Reciprocal":
		return 1 / v
	case "Neg":
		return -v
	case "Abs":
		return math.Abs(v)
	case "Floor":
		return math.Floor(v)
	case "Ceil":
		return math.Ceil(v)
	case "Exp":
		return math.Exp(v)
	case "Log":
		return math.Log(v)
	}
	return math.NaN()
}

// binaryOp applies op elementwise where the operands have the same number
// of elements or one has a single element.
func binaryOp(op string, a, b *cval) *cval {
	n := max(len(a.vals), len(b.vals))
	if (len(a.vals) != n && len(a.vals) != 1) || (len(b.vals) != n && len(b.vals) != 1) {
		return nil
	}
	out := &cval{dims: a.dims, float: a.float || b.float}
	if len(b.vals) == n && len(b.dims) >= len(a.dims) {
		out.dims = b.dims
	}
	for i := range n {
		x, y := a.vals[min(i, len(a.vals)-1)], b.vals[min(i, len(b.vals)-1)]
		k := a.known[min(i, len(a.known)-1)] && b.known[min(i, len(b.known)-1)]
		var v float64
		switch op {
		case "Add":
			v = x + y
		case "Sub":
			v = x - y
		case "Mul":
			v = x * y
		case "Div":
			if out.float {
				v = x / y
			} else if y != 0 {
				v = math.Trunc(x / y)
			} else {
				k = false
			}
		case "Pow":
			v = math.Pow(x, y)
		}
		out.vals, out.known = append(out.vals, v), append(out.known, k)
	}
	return out
}

func tensorVal(t *pbTensor) *cval {
	vals, ok := t.values()
	if !ok {
		return nil
	}
	c := &cval{dims: t.dims, vals: vals, known: make([]bool, len(vals))}
	for i := range c.known {
		c.known[i] = true
	}
	c.float = t.dtype == dtFloat || t.dtype == dtDouble || t.dtype == dtFloat16
	return c
}

func constantVal(nd *pbNode) *cval {
	for _, a := range nd.attrs {
		var c *cval
		switch a.name {
		case "value":
			if a.t != nil {
				c = tensorVal(a.t)
			}
		case "value_float":
			c = &cval{vals: []float64{float64(a.f)}, float: true}
		case "value_floats":
			c = &cval{dims: []int64{int64(len(a.floats))}, float: true}
			for _, v := range a.floats {
				c.vals = append(c.vals, float64(v))
			}
		case "value_int":
			c = &cval{vals: []float64{float64(a.i)}}
		case "value_ints":
			c = &cval{dims: []int64{int64(len(a.ints))}}
			for _, v := range a.ints {
				c.vals = append(c.vals, float64(v))
			}
		}
		if c != nil {
			if c.known == nil {
				c.known = make([]bool, len(c.vals))
				for i := range c.known {
					c.known[i] = true
				}
			}
			return c
		}
	}
	return nil
}

func (g *graphIndex) evalGather(nd *pbNode) *cval {
	if nd.intAttr("axis", 0) != 0 {
		return nil
	}
	idx, ok := g.eval(nd.input(1))
	if !ok || !idx.allKnown() {
		return nil
	}
	data, ok := g.eval(nd.input(0))
	if !ok {
		// An element of a shape that is not known (a dynamic axis) is
		// still an element: its count lets a Concat place the others.
		return &cval{dims: idx.dims, vals: make([]float64, len(idx.vals)), known: make([]bool, len(idx.vals))}
	}
	if len(data.dims) > 1 {
		return nil
	}
	out := &cval{dims: idx.dims, float: data.float}
	for _, iv := range idx.vals {
		i := int(iv)
		if i < 0 {
			i += len(data.vals)
		}
		if i < 0 || i >= len(data.vals) {
			return nil
		}
		out.vals, out.known = append(out.vals, data.vals[i]), append(out.known, data.known[i])
	}
	return out
}

func (g *graphIndex) evalSlice(nd *pbNode) *cval {
	data, ok := g.eval(nd.input(0))
	if !ok || len(data.dims) > 1 {
		return nil
	}
	var starts, ends, axes, steps []float64
	if g.opset >= 10 {
		for i, dst := range []*[]float64{&starts, &ends, &axes, &steps} {
			if nd.input(i+1) == "" {
				continue
			}
			c, ok := g.eval(nd.input(i + 1))
			if !ok || !c.allKnown() {
				return nil
			}
			*dst = c.vals
		}
	} else {
		for _, p := range []struct {
			name string
			dst  *[]float64
		}{{"starts", &starts}, {"ends", &ends}, {"axes", &axes}} {
			if a, ok := nd.attr(p.name); ok {
				for _, v := range a.ints {
					*p.dst = append(*p.dst, float64(v))
				}
			}
		}
	}
	if len(starts) != 1 || len(ends) != 1 || (len(axes) == 1 && axes[0] != 0 && axes[0] != -1) || len(axes) > 1 {
		return nil
	}
	step := int64(1)
	if len(steps) == 1 {
		step = int64(steps[0])
	}
	if step != 1 {
		return nil
	}
	n := int64(len(data.vals))
	lo, hi := clampIndex(starts[0], n), clampIndex(ends[0], n)
	out := &cval{float: data.float}
	for i := lo; i < hi; i++ {
		out.vals, out.known = append(out.vals, data.vals[i]), append(out.known, data.known[i])
	}
	out.dims = []int64{int64(len(out.vals))}
	return out
}

func clampIndex(v float64, n int64) int64 {
	if v >= float64(math.MaxInt64)/2 {
		return n
	}
	i := int64(v)
	if i < 0 {
		i += n
	}
	return min(max(i, 0), n)
}
