package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
)

// emitter writes the nodes that replace the attention blocks. Values all
// blocks share (the padding columns, the key lengths) are computed once
// from attention_mask.
type emitter struct {
	g      *graphIndex
	prefix string // of the names it makes
	names  map[string]bool
	n      int
	pre    []*pbNode // shared nodes
	cur    *[]*pbNode
	inits  []*pbTensor
	cache  map[string]string
}

func newEmitter(g *graphIndex) *emitter {
	e := &emitter{g: g, prefix: "jetembed_attention/", names: map[string]bool{}, cache: map[string]string{}}
	for _, nd := range g.f.nodes {
		for _, o := range nd.outputs {
			e.names[o] = true
		}
	}
	for _, t := range g.f.inits {
		e.names[t.name] = true
	}
	for _, in := range g.f.inputs {
		e.names[in.name] = true
	}
	e.cur = &e.pre
	return e
}

func (e *emitter) fresh(base string) string {
	for {
		e.n++
		name := e.prefix + base + "_" + strconv.Itoa(e.n)
		if !e.names[name] {
			e.names[name] = true
			return name
		}
	}
}

// op adds a node of the default domain and returns its output.
func (e *emitter) op(op string, attrs []pbAttr, inputs ...string) string {
	return e.opIn("", op, attrs, inputs...)
}

func (e *emitter) opIn(domain, op string, attrs []pbAttr, inputs ...string) string {
	out := e.fresh(op)
	e.opTo(out, domain, op, attrs, inputs...)
	return out
}

func (e *emitter) opTo(out, domain, op string, attrs []pbAttr, inputs ...string) {
	*e.cur = append(*e.cur, &pbNode{inputs: inputs, outputs: []string{out}, name: out, op: op, domain: domain, attrs: attrs})
}

// once builds a shared value the first time key is asked for.
func (e *emitter) once(key string, build func() string) string {
	if v, ok := e.cache[key]; ok {
		return v
	}
	saved := e.cur
	e.cur = &e.pre
	v := build()
	e.cur = saved
	e.cache[key] = v
	return v
}

func (e *emitter) ints(v ...int64) string {
	return e.once(fmt.Sprint("ints", v), func() string {
		t := &pbTensor{name: e.fresh("const"), dims: []int64{int64(len(v))}, dtype: dtInt64, hasData: true}
		for _, x := range v {
			t.data = binary.LittleEndian.AppendUint64(t.data, uint64(x))
		}
		e.inits = append(e.inits, t)
		return t.name
	})
}

func (e *emitter) floats(dims []int64, v ...float32) string {
	return e.once(fmt.Sprint("floats", dims, v), func() string {
		t := &pbTensor{name: e.fresh("const"), dims: dims, dtype: dtFloat, hasData: true}
		for _, x := range v {
			t.data = binary.LittleEndian.AppendUint32(t.data, math.Float32bits(x))
		}
		e.inits = append(e.inits, t)
		return t.name
	})
}

func intA(name string, v int64) pbAttr     { return pbAttr{name: name, typ: attrInt, i: v} }
func floatA(name string, v float32) pbAttr { return pbAttr{name: name, typ: attrFloat, f: v} }

// reduce emits ReduceMin or ReduceSum over axes (all when none), with the
// axes as an attribute or an input as the opset wants.
func (e *emitter) reduce(op, x string, keepdims int64, axes ...int64) string {
	attrs := []pbAttr{intA("keepdims", keepdims)}
	asInput := (op == "ReduceSum" && e.g.opset >= 13) || e.g.opset >= 18
	if len(axes) == 0 {
		return e.op(op, attrs, x)
	}
	if asInput {
		return e.op(op, attrs, x, e.ints(axes...))
	}
	return e.op(op, append(attrs, pbAttr{name: "axes", typ: attrInts, ints: axes}), x)
}

// mask64 is attention_mask as int64.
func (e *emitter) mask64() string {
	return e.once("mask64", func() string {
		return e.op("Cast", []pbAttr{intA("to", dtInt64)}, InputMask)
	})
}

// padCols is E, 1 when the chunk has padding and 0 when not, as a [1]
// int64: the width of the folded column.
func (e *emitter) padCols() string {
	return e.once("padCols", func() string {
		lowest := e.op("Reshape", nil, e.reduce("ReduceMin", e.mask64(), 0), e.ints(1))
		return e.op("Sub", nil, e.ints(1), lowest)
	})
}

// colShape is [B, S, N, E].
func (e *emitter) colShape(heads int64) string {
	return e.once(fmt.Sprint("colShape", heads), func() string {
		bs := e.op("Shape", nil, InputMask)
		return e.op("Concat", []pbAttr{intA("axis", 0)}, bs, e.ints(heads), e.padCols())
	})
}

// queryCol is the folded query column: ones, [B, S, N, E].
func (e *emitter) queryCol(heads int64) string {
	return e.once(fmt.Sprint("queryCol", heads), func() string {
		return e.op("Expand", nil, e.floats([]int64{1, 1, 1, 1}, 1), e.colShape(heads))
	})
}

// keyCol is the folded key column: maskedScore/scale at padding keys and
// 0 at real ones, [B, S, N, E]. Times the query column's 1 and the scale,
// it adds maskedScore to a padding key's score.
func (e *emitter) keyCol(heads int64, scale float64) string {
	c := float32(maskedScore / scale)
	return e.once(fmt.Sprint("keyCol", heads, c), func() string {
		padding := e.once("padding", func() string {
			real := e.op("Cast", []pbAttr{intA("to", dtFloat)}, InputMask)
			pad := e.op("Sub", nil, e.floats(nil, 1), real)
			return e.op("Reshape", nil, pad, e.ints(0, 0, 1, 1))
		})
		col := e.op("Mul", nil, padding, e.floats(nil, c))
		return e.op("Expand", nil, col, e.colShape(heads))
	})
}

// keyLengths are the real tokens of each row, [B] int32: CUDA's 1-D key
// padding mask (the engine pads at the end).
func (e *emitter) keyLengths() string {
	return e.once("keyLengths", func() string {
		return e.op("Cast", []pbAttr{intA("to", dtInt32)}, e.reduce("ReduceSum", e.mask64(), 0, 1))
	})
}

// noPadding is a bool scalar, true when no row of the chunk has padding.
func (e *emitter) noPadding() string {
	return e.once("noPadding", func() string {
		return e.op("Equal", nil, e.reduce("ReduceMin", e.mask64(), 0), e.once("one64", func() string {
			t := &pbTensor{name: e.fresh("const"), dtype: dtInt64, hasData: true, data: binary.LittleEndian.AppendUint64(nil, 1)}
			e.inits = append(e.inits, t)
			return t.name
		}))
	})
}

// block emits the replacement of b and returns its nodes; the last one
// writes b.out.
func (e *emitter) block(b *attnBlock, target AttentionTarget) []*pbNode {
	var nodes []*pbNode
	e.cur = &nodes
	defer func() { e.cur = &e.pre }()

	q, k, v := b.q4, b.k4, b.v4
	if b.dtype == dtFloat16 {
		// The CPU kernel, and its flash path, are float32 only.
		toF := []pbAttr{intA("to", dtFloat)}
		q, k, v = e.op("Cast", toF, q), e.op("Cast", toF, k), e.op("Cast", toF, v)
	}
	attrs := []pbAttr{intA("num_heads", b.heads), floatA("scale", float32(b.scale))}
	flat := e.ints(0, 0, -1)
	var out string
	switch {
	case b.masked && target == AttentionCPU:
		q = e.op("Concat", []pbAttr{intA("axis", 3)}, q, e.queryCol(b.heads))
		k = e.op("Concat", []pbAttr{intA("axis", 3)}, k, e.keyCol(b.heads, b.scale))
		out = e.opIn(mhaDomain, "MultiHeadAttention", attrs,
			e.op("Reshape", nil, q, flat), e.op("Reshape", nil, k, flat), e.op("Reshape", nil, v, flat))
	case b.masked:
		q3, k3, v3 := e.op("Reshape", nil, q, flat), e.op("Reshape", nil, k, flat), e.op("Reshape", nil, v, flat)
		out = e.ifPadded(q3, k3, v3, attrs)
	default:
		out = e.opIn(mhaDomain, "MultiHeadAttention", attrs,
			e.op("Reshape", nil, q, flat), e.op("Reshape", nil, k, flat), e.op("Reshape", nil, v, flat))
	}
	if b.dtype == dtFloat16 {
		out = e.op("Cast", []pbAttr{intA("to", dtFloat16)}, out)
	}
	shape := e.ints(0, 0, b.heads*b.vHeadSize)
	if b.outRank == 2 {
		shape = e.ints(-1, b.heads*b.vHeadSize)
	}
	e.opTo(b.out, "", "Reshape", nil, out, shape)
	return nodes
}

// ifPadded is CUDA's per-chunk choice: MultiHeadAttention without a mask
// when no row is padded, with the key lengths when one is.
func (e *emitter) ifPadded(q, k, v string, attrs []pbAttr) string {
	lengths, cond := e.keyLengths(), e.noPadding()
	branch := func(name string, inputs ...string) []byte {
		out := e.fresh(name)
		mha := &pbNode{inputs: inputs, outputs: []string{out}, name: out, op: "MultiHeadAttention", domain: mhaDomain, attrs: attrs}
		var g []byte
		g = protowire.AppendTag(g, fieldNode, protowire.BytesType)
		g = protowire.AppendBytes(g, mha.encode())
		g = appendStr(g, 2, name)
		var vi []byte // ValueInfoProto: name, type float tensor
		vi = appendStr(vi, 1, out)
		var tt []byte
		tt = protowire.AppendTag(tt, 1, protowire.VarintType)
		tt = protowire.AppendVarint(tt, dtFloat)
		var typ []byte
		typ = protowire.AppendTag(typ, 1, protowire.BytesType)
		typ = protowire.AppendBytes(typ, tt)
		vi = protowire.AppendTag(vi, 2, protowire.BytesType)
		vi = protowire.AppendBytes(vi, typ)
		g = protowire.AppendTag(g, graphOutput, protowire.BytesType)
		return protowire.AppendBytes(g, vi)
	}
	out := e.fresh("If")
	nd := &pbNode{
		inputs: []string{cond}, outputs: []string{out}, name: out, op: "If",
		attrs: []pbAttr{
			{name: "then_branch", typ: attrGraph, g: branch("unpadded", q, k, v)},
			{name: "else_branch", typ: attrGraph, g: branch("padded", q, k, v, "", lengths)},
		},
		subInputs: []string{q, k, v, lengths},
	}
	*e.cur = append(*e.cur, nd)
	return out
}

// take returns a block's nodes (a hook for the caller's bookkeeping).
func (e *emitter) take(nodes []*pbNode) []*pbNode { return nodes }

// prepend puts the shared nodes first; the topological sort orders them
// after attention_mask's producers (none: it is an input).
func (e *emitter) prepend(nodes []*pbNode) []*pbNode {
	return append(append([]*pbNode{}, e.pre...), nodes...)
}
