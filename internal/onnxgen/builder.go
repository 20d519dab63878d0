package onnxgen

import (
	"encoding/binary"
	"fmt"
	"math"
)

// builder accumulates nodes and initializers. Every value gets a unique
// name from a counter, so two builds of the same model name things alike.
type builder struct {
	g    graph
	n    int
	fp16 bool // store float weights as float16 and Cast them up
	attn Attention
}

func (b *builder) fresh(prefix string) string {
	b.n++
	return fmt.Sprintf("%s_%d", prefix, b.n)
}

// op adds a node with one output and returns that output's name.
func (b *builder) op(op string, attrs []attribute, inputs ...string) string {
	out := b.fresh(op)
	b.g.nodes = append(b.g.nodes, node{op: op, name: out + "_node", inputs: inputs, outputs: []string{out}, attrs: attrs})
	return out
}

// opTo is op with a chosen output name (graph outputs).
func (b *builder) opTo(out, op string, attrs []attribute, inputs ...string) string {
	b.g.nodes = append(b.g.nodes, node{op: op, name: out + "_node", inputs: inputs, outputs: []string{out}, attrs: attrs})
	return out
}

// weight adds a float initializer. With fp16 it is stored as float16 and
// cast to float32 in the graph, so the model file halves while the compute
// (and the output types of the contract) stay float32.
func (b *builder) weight(name string, dims []int64, data []float32) string {
	if !b.fp16 {
		raw := make([]byte, 0, 4*len(data))
		for _, v := range data {
			raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
		}
		b.g.inits = append(b.g.inits, tensor{name: name, dims: dims, dtype: dtFloat, raw: raw, extOffset: -1})
		return name
	}
	raw := make([]byte, 0, 2*len(data))
	for _, v := range data {
		raw = binary.LittleEndian.AppendUint16(raw, floatToHalf(v))
	}
	b.g.inits = append(b.g.inits, tensor{name: name + "_fp16", dims: dims, dtype: dtFloat16, raw: raw, extOffset: -1})
	return b.opTo(name, "Cast", []attribute{intAttr("to", dtFloat)}, name+"_fp16")
}

// scalar adds a float32 constant of shape [] (always float32: constants are
// exact in either precision mode).
func (b *builder) scalar(v float32) string {
	name := b.fresh("const")
	raw := binary.LittleEndian.AppendUint32(nil, math.Float32bits(v))
	b.g.inits = append(b.g.inits, tensor{name: name, dtype: dtFloat, raw: raw, extOffset: -1})
	return name
}

// ints adds an int64 constant of shape [len(v)], or [] when scalar is set.
func (b *builder) ints(scalar bool, v ...int64) string {
	name := b.fresh("const")
	var raw []byte
	for _, x := range v {
		raw = binary.LittleEndian.AppendUint64(raw, uint64(x))
	}
	t := tensor{name: name, dtype: dtInt64, raw: raw, extOffset: -1}
	if !scalar {
		t.dims = []int64{int64(len(v))}
	}
	b.g.inits = append(b.g.inits, t)
	return name
}

func intAttr(name string, v int64) attribute {
	return attribute{name: name, kind: attrInt, i: v}
}

func intsAttr(name string, v ...int64) attribute {
	return attribute{name: name, kind: attrInts, ints: v}
}

func floatAttr(name string, v float32) attribute {
	return attribute{name: name, kind: attrFloat, f: v}
}

// linear is x @ w + bias with w stored [in, out] (already transposed from
// the torch [out, in] layout).
func (b *builder) linear(x, w, bias string) string {
	return b.op("Add", nil, b.op("MatMul", nil, x, w), bias)
}

// layerNorm normalizes the last axis.
func (b *builder) layerNorm(x, gamma, beta string, eps float32) string {
	return b.op("LayerNormalization", []attribute{intAttr("axis", -1), floatAttr("epsilon", eps)}, x, gamma, beta)
}

// gelu is the exact (Erf) GELU of BERT and XLM-R: x * 0.5 * (1 + erf(x/√2)).
// The Gelu op would need opset 20.
func (b *builder) gelu(x string) string {
	e := b.op("Erf", nil, b.op("Div", nil, x, b.scalar(float32(math.Sqrt2))))
	return b.op("Mul", nil, b.op("Mul", nil, x, b.scalar(0.5)), b.op("Add", nil, e, b.scalar(1)))
}

// l2Normalize divides x by its L2 norm over the last axis, floored at 1e-12
// like torch.nn.functional.normalize, so an all-zero (masked) row stays zero
// instead of turning into NaN.
func (b *builder) l2Normalize(x string) string {
	norm := b.op("ReduceL2", []attribute{intsAttr("axes", -1), intAttr("keepdims", 1)}, x)
	return b.op("Div", nil, x, b.op("Max", nil, norm, b.scalar(1e-12)))
}

// floatToHalf rounds a float32 to the nearest IEEE 754 half (ties to even).
func floatToHalf(f float32) uint16 {
	bits := math.Float32bits(f)
	sign := uint16(bits>>16) & 0x8000
	exp := int((bits>>23)&0xff) - 127 + 15
	mant := bits & 0x7fffff
	switch {
	case (bits>>23)&0xff == 0xff: // Inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp >= 0x1f:
		return sign | 0x7c00
	case exp <= 0:
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - exp)
		half := mant >> shift
		rem := mant & (1<<shift - 1)
		mid := uint32(1) << (shift - 1)
		if rem > mid || (rem == mid && half&1 == 1) {
			half++
		}
		return sign | uint16(half)
	}
	half := uint32(exp)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && half&1 == 1) {
		half++ // a carry into the exponent is still the right rounding
	}
	return sign | uint16(half)
}
