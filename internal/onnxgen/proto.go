package onnxgen

import (
	"math"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
)

// The ONNX IR version and opset the generator targets. Opset 17 is the first
// with LayerNormalization; IR 8 is what opset 17 was released with.
const (
	irVersion    = 8
	opsetVersion = 17
)

// ONNX TensorProto.DataType values used here.
const (
	dtFloat   = 1
	dtInt64   = 7
	dtBool    = 9
	dtFloat16 = 10
)

// ONNX AttributeProto.AttributeType values used here.
const (
	attrFloat = 1
	attrInt   = 2
	attrInts  = 7
)

// tensor is an initializer: raw little-endian bytes of one data type.
type tensor struct {
	name  string
	dims  []int64
	dtype int
	raw   []byte
	// extOffset >= 0 stores raw in the external data file at that offset
	// instead of inline (see externalize).
	extOffset int64
}

// attribute is one node attribute; which value is set follows kind.
type attribute struct {
	name string
	kind int
	f    float32
	i    int64
	ints []int64
}

// node is one NodeProto of the default (ai.onnx) domain.
type node struct {
	op      string
	name    string
	inputs  []string
	outputs []string
	attrs   []attribute
}

// valueInfo is a graph input or output: a tensor of dtype whose dims are
// either a fixed size or a symbolic name (a dynamic axis).
type valueInfo struct {
	name  string
	dtype int
	dims  []dim
}

type dim struct {
	value int64
	param string
}

// graph is what encodeModel serializes.
type graph struct {
	name    string
	nodes   []node
	inits   []tensor
	inputs  []valueInfo
	outputs []valueInfo
}

// encodeModel serializes a ModelProto. Fields are written in field-number
// order, which is what makes the bytes depend on nothing but the graph.
func encodeModel(g *graph, producer, docString string) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType) // ir_version
	b = protowire.AppendVarint(b, irVersion)
	b = appendString(b, 2, producer) // producer_name
	b = appendString(b, 6, docString)
	b = appendMessage(b, 7, encodeGraph(g))
	var opset []byte
	opset = appendString(opset, 1, "")
	opset = protowire.AppendTag(opset, 2, protowire.VarintType)
	opset = protowire.AppendVarint(opset, opsetVersion)
	b = appendMessage(b, 8, opset) // opset_import
	return b
}

func encodeGraph(g *graph) []byte {
	var b []byte
	for _, n := range g.nodes {
		b = appendMessage(b, 1, encodeNode(n))
	}
	b = appendString(b, 2, g.name)
	for _, t := range g.inits {
		b = appendMessage(b, 5, encodeTensor(t))
	}
	for _, v := range g.inputs {
		b = appendMessage(b, 11, encodeValueInfo(v))
	}
	for _, v := range g.outputs {
		b = appendMessage(b, 12, encodeValueInfo(v))
	}
	return b
}

func encodeNode(n node) []byte {
	var b []byte
	for _, in := range n.inputs {
		b = appendString(b, 1, in)
	}
	for _, out := range n.outputs {
		b = appendString(b, 2, out)
	}
	b = appendString(b, 3, n.name)
	b = appendString(b, 4, n.op)
	for _, a := range n.attrs {
		b = appendMessage(b, 5, encodeAttribute(a))
	}
	return b
}

func encodeAttribute(a attribute) []byte {
	var b []byte
	b = appendString(b, 1, a.name)
	switch a.kind {
	case attrFloat:
		b = protowire.AppendTag(b, 2, protowire.Fixed32Type)
		b = protowire.AppendFixed32(b, math.Float32bits(a.f))
	case attrInt:
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(a.i))
	case attrInts:
		var packed []byte
		for _, v := range a.ints {
			packed = protowire.AppendVarint(packed, uint64(v))
		}
		b = protowire.AppendTag(b, 8, protowire.BytesType)
		b = protowire.AppendBytes(b, packed)
	}
	b = protowire.AppendTag(b, 20, protowire.VarintType) // type
	b = protowire.AppendVarint(b, uint64(a.kind))
	return b
}

func encodeTensor(t tensor) []byte {
	var b []byte
	if len(t.dims) > 0 {
		var packed []byte
		for _, d := range t.dims {
			packed = protowire.AppendVarint(packed, uint64(d))
		}
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, packed)
	}
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(t.dtype))
	b = appendString(b, 8, t.name)
	if t.extOffset < 0 {
		b = protowire.AppendTag(b, 9, protowire.BytesType) // raw_data
		return protowire.AppendBytes(b, t.raw)
	}
	for _, kv := range [][2]string{
		{"location", ExternalDataFile},
		{"offset", strconv.FormatInt(t.extOffset, 10)},
		{"length", strconv.Itoa(len(t.raw))},
	} {
		var e []byte
		e = appendString(e, 1, kv[0])
		e = appendString(e, 2, kv[1])
		b = appendMessage(b, 13, e) // external_data
	}
	b = protowire.AppendTag(b, 14, protowire.VarintType) // data_location EXTERNAL
	return protowire.AppendVarint(b, 1)
}

// ExternalDataFile is where [Config.ExternalData] puts the weights, beside
// model.onnx, as torch.onnx.export and optimum do for models over 2 GB.
const ExternalDataFile = "model.onnx_data"

// externalData moves every initializer of at least 1 KiB into one data
// blob (offsets aligned to 64 bytes, as ONNX's external data writer
// does) and returns it.
func externalData(g *graph) []byte {
	var data []byte
	for i := range g.inits {
		t := &g.inits[i]
		if len(t.raw) < 1024 {
			continue
		}
		for len(data)%64 != 0 {
			data = append(data, 0)
		}
		t.extOffset = int64(len(data))
		data = append(data, t.raw...)
	}
	return data
}

func encodeValueInfo(v valueInfo) []byte {
	var shape []byte
	for _, d := range v.dims {
		var db []byte
		if d.param != "" {
			db = appendString(db, 2, d.param)
		} else {
			db = protowire.AppendTag(db, 1, protowire.VarintType)
			db = protowire.AppendVarint(db, uint64(d.value))
		}
		shape = appendMessage(shape, 1, db)
	}
	var tt []byte // TypeProto.Tensor
	tt = protowire.AppendTag(tt, 1, protowire.VarintType)
	tt = protowire.AppendVarint(tt, uint64(v.dtype))
	tt = appendMessage(tt, 2, shape)
	var typ []byte
	typ = appendMessage(typ, 1, tt)
	var b []byte
	b = appendString(b, 1, v.name)
	b = appendMessage(b, 2, typ)
	return b
}

// appendString writes a string field, skipping the empty string (proto3-style
// default) so optional names cost nothing.
func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendMessage(b []byte, num protowire.Number, m []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}
