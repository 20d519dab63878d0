package modeltest

import (
	"encoding/binary"
	"math"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
)

// A minimal ONNX protobuf writer: just the fields of onnx.proto that the
// test graphs use (IR version 8, opset 17).

const (
	onnxFloat = 1 // TensorProto.DataType FLOAT
	onnxInt64 = 7 // TensorProto.DataType INT64
	onnxInt32 = 6 // TensorProto.DataType INT32

	attrInt = 2
)

type pb []byte

func (b pb) bytes(num protowire.Number, v []byte) pb {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func (b pb) str(num protowire.Number, s string) pb { return b.bytes(num, []byte(s)) }

func (b pb) varint(num protowire.Number, v int64) pb {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(v))
}

// node is a NodeProto.
type node struct {
	op      string
	inputs  []string
	outputs []string
	attrs   []pb
}

func (n node) encode(name string) pb {
	var b pb
	for _, in := range n.inputs {
		b = b.str(1, in)
	}
	for _, out := range n.outputs {
		b = b.str(2, out)
	}
	b = b.str(3, name).str(4, n.op)
	for _, a := range n.attrs {
		b = b.bytes(5, a)
	}
	return b
}

func intAttr(name string, v int64) pb {
	return pb(nil).str(1, name).varint(20, attrInt).varint(3, v)
}

// intsAttr is an INTS attribute (AttributeProto type 7, field 8).
func intsAttr(name string, vs ...int64) pb {
	b := pb(nil).str(1, name).varint(20, 7)
	for _, v := range vs {
		b = b.varint(8, v)
	}
	return b
}

// floatTensor and int64Tensor are TensorProto initializers with raw data.
func floatTensor(name string, dims []int64, data []float32) pb {
	raw := make([]byte, 0, 4*len(data))
	for _, v := range data {
		raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
	}
	return tensor(name, onnxFloat, dims, raw)
}

func int64Tensor(name string, dims []int64, data []int64) pb {
	raw := make([]byte, 0, 8*len(data))
	for _, v := range data {
		raw = binary.LittleEndian.AppendUint64(raw, uint64(v))
	}
	return tensor(name, onnxInt64, dims, raw)
}

func tensor(name string, typ int64, dims []int64, raw []byte) pb {
	var b pb
	for _, d := range dims {
		b = b.varint(1, d)
	}
	return b.varint(2, typ).str(8, name).bytes(9, raw)
}

// valueInfo is a ValueInfoProto of a tensor whose dims are symbolic
// (string) or fixed (int).
func valueInfo(name string, elem int64, dims ...any) pb {
	var shape pb
	for _, d := range dims {
		switch d := d.(type) {
		case string:
			shape = shape.bytes(1, pb(nil).str(2, d))
		case int:
			shape = shape.bytes(1, pb(nil).varint(1, int64(d)))
		}
	}
	tt := pb(nil).varint(1, elem).bytes(2, shape)
	return pb(nil).str(1, name).bytes(2, pb(nil).bytes(1, tt))
}

// graph is a GraphProto under construction.
type graph struct {
	nodes        []node
	initializers []pb
	inputs       []pb
	outputs      []pb
}

func (g *graph) add(op string, inputs []string, output string, attrs ...pb) string {
	g.nodes = append(g.nodes, node{op: op, inputs: inputs, outputs: []string{output}, attrs: attrs})
	return output
}

// model encodes g as a ModelProto.
func (g *graph) model(name string) []byte {
	var gb pb
	for i, n := range g.nodes {
		gb = gb.bytes(1, n.encode(n.op+"_"+strconv.Itoa(i)))
	}
	gb = gb.str(2, name)
	for _, t := range g.initializers {
		gb = gb.bytes(5, t)
	}
	for _, v := range g.inputs {
		gb = gb.bytes(11, v)
	}
	for _, v := range g.outputs {
		gb = gb.bytes(12, v)
	}
	opset := pb(nil).str(1, "").varint(2, 17)
	var mb pb
	mb = mb.varint(1, 8).str(2, "jetembed-modeltest").bytes(7, gb).bytes(8, opset)
	return mb
}
