package model

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"

	"google.golang.org/protobuf/encoding/protowire"
)

// onnxFile is a model.onnx read for a graph rewrite. The nodes are decoded;
// every other field (the initializers' data above all) is only located in
// the file, so the rewritten model copies it byte for byte and a model of
// gigabytes costs its nodes in memory until it is written out.
type onnxFile struct {
	path string
	// head are the ModelProto fields but the graph; graphRest the
	// GraphProto fields but the nodes and initializers (name, inputs,
	// outputs, value infos, ...).
	head      []span
	graphRest []span
	nodes     []*pbNode
	inits     []*pbTensor
	// opsets maps an operator set domain ("" for ai.onnx) to its version.
	opsets    map[string]int64
	inputs    []valueInfo
	outputs   []string
	valueInfo map[string]valueInfo
}

// span is a whole protobuf field (tag, length and payload) in the file.
type span struct{ off, n int64 }

// pbNode is a NodeProto. raw is its payload as read, written back as it
// was; a node the rewrite adds has none and is encoded from the fields.
type pbNode struct {
	raw             []byte
	inputs, outputs []string
	name, op        string
	domain          string
	attrs           []pbAttr
	// subInputs are the names the node's subgraphs (If, Loop, Scan) read,
	// outer-scope values among them.
	subInputs []string
}

// pbAttr is an AttributeProto of the kinds the rewrite reads or writes.
type pbAttr struct {
	name   string
	typ    int32
	f      float32
	i      int64
	s      []byte
	t      *pbTensor
	floats []float32
	ints   []int64
	sub    []string // names read by a graph attribute's nodes
	g      []byte   // an encoded GraphProto, for the attributes the rewrite adds
}

// pbTensor is a TensorProto: an initializer or a Constant's value. data
// holds its little-endian values when the tensor is small (the ones the
// rewrite evaluates: shapes, scales); field locates an initializer in the
// file.
type pbTensor struct {
	field    span
	name     string
	dims     []int64
	dtype    int32
	data     []byte
	hasData  bool
	external bool
}

// valueInfo is a graph input, output or value_info entry: its element type
// and dims (-1 where symbolic or absent).
type valueInfo struct {
	name     string
	elem     int32
	dims     []int64
	hasShape bool
}

// ONNX enum values the rewrite uses.
const (
	dtFloat   = 1
	dtInt32   = 6
	dtInt64   = 7
	dtFloat16 = 10
	dtDouble  = 11

	attrFloat  = 1
	attrInt    = 2
	attrString = 3
	attrTensor = 4
	attrGraph  = 5
	attrFloats = 6
	attrInts   = 7
)

// Reading limits: a node (a Constant with a large value included) or a
// value info above maxNodeSize is refused; a tensor up to smallTensor
// bytes is read with its data.
const (
	maxNodeSize = 64 << 20
	smallTensor = 64 << 10
)

// readONNXFile reads path for a rewrite.
func readONNXFile(path string) (*onnxFile, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	f := &onnxFile{path: path, opsets: map[string]int64{}, valueInfo: map[string]valueInfo{}}
	r := &pbReader{f: fh, br: bufio.NewReaderSize(fh, 64<<10)}
	found := false
	err = r.walk(st.Size(), func(num protowire.Number, typ protowire.Type, at span, n int64) error {
		switch {
		case num == modelGraph && typ == protowire.BytesType:
			found = true
			return f.readGraph(r, n)
		case num == modelOpset && typ == protowire.BytesType:
			b, err := r.bytes(n)
			if err != nil {
				return err
			}
			domain, version, err := decodeOpset(b)
			if err != nil {
				return err
			}
			f.opsets[domain] = version
			return nil // written from f.opsets
		case typ == protowire.BytesType:
			if err := r.skip(n); err != nil {
				return err
			}
		}
		f.head = append(f.head, at)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, path, err)
	}
	if !found {
		return nil, fmt.Errorf("%w: %s: no graph", ErrInvalid, path)
	}
	return f, nil
}

// Field numbers of onnx.proto beyond those of graph.go.
const (
	modelOpset       = 8
	graphNode        = 1
	graphInitializer = 5
	graphValueInfo   = 13
)

func (f *onnxFile) readGraph(r *pbReader, size int64) error {
	return r.walk(size, func(num protowire.Number, typ protowire.Type, at span, n int64) error {
		if typ != protowire.BytesType {
			f.graphRest = append(f.graphRest, at)
			return nil
		}
		switch num {
		case graphNode:
			if n > maxNodeSize {
				return fmt.Errorf("a node of %d bytes", n)
			}
			b, err := r.bytes(n)
			if err != nil {
				return err
			}
			nd, err := decodeNode(b)
			if err != nil {
				return fmt.Errorf("node: %w", err)
			}
			f.nodes = append(f.nodes, nd)
			return nil
		case graphInitializer:
			t, err := readTensor(r, n)
			if err != nil {
				return fmt.Errorf("initializer: %w", err)
			}
			t.field = at
			f.inits = append(f.inits, t)
			return nil
		case graphInput, graphOutput, graphValueInfo:
			if n > maxValueInfoSize {
				return fmt.Errorf("value info of %d bytes", n)
			}
			b, err := r.bytes(n)
			if err != nil {
				return err
			}
			vi, err := decodeValueInfo(b)
			if err != nil {
				return fmt.Errorf("value info: %w", err)
			}
			switch num {
			case graphInput:
				f.inputs = append(f.inputs, vi)
			case graphOutput:
				f.outputs = append(f.outputs, vi.name)
			}
			if vi.hasShape {
				f.valueInfo[vi.name] = vi
			}
		default:
			if err := r.skip(n); err != nil {
				return err
			}
		}
		f.graphRest = append(f.graphRest, at)
		return nil
	})
}

// readTensor reads a TensorProto of n bytes: whole when small, else its
// header only.
func readTensor(r *pbReader, n int64) (*pbTensor, error) {
	if n <= smallTensor {
		b, err := r.bytes(n)
		if err != nil {
			return nil, err
		}
		return decodeTensor(b)
	}
	t := &pbTensor{}
	err := r.walk(n, func(num protowire.Number, typ protowire.Type, _ span, n int64) error {
		if typ == protowire.VarintType {
			return t.decodeScalar(num, typ, uint64(n))
		}
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1, 8, 13:
			if n > maxValueInfoSize {
				return fmt.Errorf("tensor field %d of %d bytes", num, n)
			}
			b, err := r.bytes(n)
			if err != nil {
				return err
			}
			return t.decodeField(num, protowire.BytesType, b)
		}
		return r.skip(n)
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// walk calls fn for each field in the next size bytes. For a
// length-delimited field, r is at its payload of n bytes and fn must
// consume exactly n; for the others walk consumed the value, and n is a
// varint's value (0 for fixed-size fields). at is the whole field, tag
// included.
func (r *pbReader) walk(size int64, fn func(num protowire.Number, typ protowire.Type, at span, n int64) error) error {
	end := r.off + size
	for r.off < end {
		start := r.off
		tag, err := binary.ReadUvarint(r)
		if err != nil {
			return err
		}
		num, typ := protowire.DecodeTag(tag)
		if num <= 0 {
			return fmt.Errorf("bad field number %d at offset %d", num, start)
		}
		var n int64
		switch typ {
		case protowire.VarintType:
			var u uint64
			u, err = binary.ReadUvarint(r)
			n = int64(u)
		case protowire.Fixed64Type:
			err = r.skip(8)
		case protowire.Fixed32Type:
			err = r.skip(4)
		case protowire.BytesType:
			var u uint64
			if u, err = binary.ReadUvarint(r); err != nil {
				return err
			}
			if u > uint64(end-r.off) {
				return fmt.Errorf("field %d of %d bytes overruns its message at offset %d", num, u, r.off)
			}
			n = int64(u)
		default:
			err = fmt.Errorf("unsupported wire type %d for field %d", typ, num)
		}
		if err != nil {
			return err
		}
		payload := r.off
		if typ == protowire.BytesType {
			if err := fn(num, typ, span{start, payload + n - start}, n); err != nil {
				return err
			}
			if r.off != payload+n {
				return fmt.Errorf("field %d: read %d of %d bytes", num, r.off-payload, n)
			}
			continue
		}
		if err := fn(num, typ, span{start, r.off - start}, n); err != nil {
			return err
		}
	}
	if r.off != end {
		return fmt.Errorf("message overruns its length by %d bytes", r.off-end)
	}
	return nil
}

func (r *pbReader) bytes(n int64) ([]byte, error) {
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return b, err
}

// eachField calls fn for every field of the message b.
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, u uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		var u uint64
		switch typ {
		case protowire.VarintType:
			u, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var x uint32
			x, n = protowire.ConsumeFixed32(b)
			u = uint64(x)
		case protowire.Fixed64Type:
			u, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := fn(num, typ, v, u); err != nil {
			return err
		}
	}
	return nil
}

func decodeOpset(b []byte) (domain string, version int64, err error) {
	err = eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, u uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			domain = string(v)
		case num == 2 && typ == protowire.VarintType:
			version = int64(u)
		}
		return nil
	})
	return domain, version, err
}

func decodeNode(b []byte) (*pbNode, error) {
	nd := &pbNode{raw: b}
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1:
			nd.inputs = append(nd.inputs, string(v))
		case 2:
			nd.outputs = append(nd.outputs, string(v))
		case 3:
			nd.name = string(v)
		case 4:
			nd.op = string(v)
		case 7:
			nd.domain = string(v)
		case 5:
			a, err := decodeAttr(v)
			if err != nil {
				return err
			}
			nd.attrs = append(nd.attrs, a)
			nd.subInputs = append(nd.subInputs, a.sub...)
		}
		return nil
	})
	return nd, err
}

func decodeAttr(b []byte) (pbAttr, error) {
	var a pbAttr
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, u uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			a.name = string(v)
		case num == 20 && typ == protowire.VarintType:
			a.typ = int32(u)
		case num == 2 && typ == protowire.Fixed32Type:
			a.f = math.Float32frombits(uint32(u))
		case num == 3 && typ == protowire.VarintType:
			a.i = int64(u)
		case num == 4 && typ == protowire.BytesType:
			a.s = v
		case num == 5 && typ == protowire.BytesType:
			t, err := decodeTensor(v)
			if err != nil {
				return err
			}
			a.t = t
		case (num == 6 || num == 11) && typ == protowire.BytesType: // g, graphs
			in, err := subgraphInputs(v)
			if err != nil {
				return err
			}
			a.sub = append(a.sub, in...)
		case num == 7:
			fs, err := appendFloats(a.floats, typ, v, u)
			if err != nil {
				return err
			}
			a.floats = fs
		case num == 8:
			is, err := appendVarints(a.ints, typ, v, u)
			if err != nil {
				return err
			}
			a.ints = is
		}
		return nil
	})
	return a, err
}

// subgraphInputs lists the inputs of every node of a GraphProto,
// nested subgraphs included.
func subgraphInputs(b []byte) ([]string, error) {
	var out []string
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num != graphNode || typ != protowire.BytesType {
			return nil
		}
		nd, err := decodeNode(v)
		if err != nil {
			return err
		}
		out = append(append(out, nd.inputs...), nd.subInputs...)
		return nil
	})
	return out, err
}

func appendVarints(out []int64, typ protowire.Type, v []byte, u uint64) ([]int64, error) {
	if typ == protowire.VarintType {
		return append(out, int64(u)), nil
	}
	if typ != protowire.BytesType {
		return out, nil
	}
	for len(v) > 0 {
		x, n := protowire.ConsumeVarint(v)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		out = append(out, int64(x))
		v = v[n:]
	}
	return out, nil
}

func appendFloats(out []float32, typ protowire.Type, v []byte, u uint64) ([]float32, error) {
	if typ == protowire.Fixed32Type {
		return append(out, math.Float32frombits(uint32(u))), nil
	}
	if typ != protowire.BytesType {
		return out, nil
	}
	if len(v)%4 != 0 {
		return nil, errors.New("packed floats of a length not a multiple of 4")
	}
	for i := 0; i < len(v); i += 4 {
		out = append(out, math.Float32frombits(binary.LittleEndian.Uint32(v[i:])))
	}
	return out, nil
}

func decodeTensor(b []byte) (*pbTensor, error) {
	t := &pbTensor{}
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, u uint64) error {
		if typ == protowire.BytesType {
			return t.decodeField(num, typ, v)
		}
		return t.decodeScalar(num, typ, u)
	})
	return t, err
}

// decodeField reads one length-delimited TensorProto field. Typed data
// (float_data, int64_data, ...) is kept as little-endian bytes like
// raw_data.
func (t *pbTensor) decodeField(num protowire.Number, typ protowire.Type, v []byte) error {
	switch num {
	case 1:
		d, err := appendVarints(t.dims, typ, v, 0)
		if err != nil {
			return err
		}
		t.dims = d
	case 8:
		t.name = string(v)
	case 9:
		t.data, t.hasData = v, true
	case 13:
		t.external = true
	case 4: // float_data, packed fixed32: already little-endian float32
		t.data, t.hasData = append(t.data, v...), true
	case 5, 7: // int32_data, int64_data, packed varints
		xs, err := appendVarints(nil, typ, v, 0)
		if err != nil {
			return err
		}
		for _, x := range xs {
			if num == 5 {
				t.data = binary.LittleEndian.AppendUint32(t.data, uint32(int32(x)))
			} else {
				t.data = binary.LittleEndian.AppendUint64(t.data, uint64(x))
			}
		}
		t.hasData = true
	case 10: // double_data, packed fixed64
		t.data, t.hasData = append(t.data, v...), true
	}
	return nil
}

func (t *pbTensor) decodeScalar(num protowire.Number, typ protowire.Type, u uint64) error {
	switch {
	case num == 1 && typ == protowire.VarintType:
		t.dims = append(t.dims, int64(u))
	case num == 2 && typ == protowire.VarintType:
		t.dtype = int32(u)
	case num == 14 && typ == protowire.VarintType:
		t.external = t.external || u == 1
	case num == 4 && typ == protowire.Fixed32Type:
		t.data, t.hasData = binary.LittleEndian.AppendUint32(t.data, uint32(u)), true
	case (num == 5 || num == 7) && typ == protowire.VarintType:
		if num == 5 {
			t.data = binary.LittleEndian.AppendUint32(t.data, uint32(int32(u)))
		} else {
			t.data = binary.LittleEndian.AppendUint64(t.data, u)
		}
		t.hasData = true
	case num == 10 && typ == protowire.Fixed64Type:
		t.data, t.hasData = binary.LittleEndian.AppendUint64(t.data, u), true
	}
	return nil
}

func decodeValueInfo(b []byte) (valueInfo, error) {
	var vi valueInfo
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			vi.name = string(v)
		case num == 2 && typ == protowire.BytesType:
			return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if num != 1 || typ != protowire.BytesType { // TypeProto.tensor_type
					return nil
				}
				return decodeTensorType(v, &vi)
			})
		}
		return nil
	})
	return vi, err
}

func decodeTensorType(b []byte, vi *valueInfo) error {
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, u uint64) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			vi.elem = int32(u)
		case num == 2 && typ == protowire.BytesType:
			vi.hasShape = true
			return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if num != 1 || typ != protowire.BytesType {
					return nil
				}
				d := int64(-1)
				err := eachField(v, func(num protowire.Number, typ protowire.Type, _ []byte, u uint64) error {
					if num == 1 && typ == protowire.VarintType {
						d = int64(u)
					}
					return nil
				})
				vi.dims = append(vi.dims, d)
				return err
			})
		}
		return nil
	})
}

// numel is the number of elements of a tensor, -1 when a dim is unknown.
func numel(dims []int64) int64 {
	n := int64(1)
	for _, d := range dims {
		if d < 0 || (d > 0 && n > (1<<50)/d) {
			return -1
		}
		n *= d
	}
	return n
}

// values returns the tensor's elements as float64 (for the integer and
// float types the rewrite evaluates) and whether it could.
func (t *pbTensor) values() ([]float64, bool) {
	if !t.hasData || t.external {
		return nil, false
	}
	n := numel(t.dims)
	var size int
	switch t.dtype {
	case dtFloat, dtInt32:
		size = 4
	case dtInt64, dtDouble:
		size = 8
	case dtFloat16:
		size = 2
	default:
		return nil, false
	}
	if n < 0 || int64(len(t.data)) != n*int64(size) {
		return nil, false
	}
	out := make([]float64, n)
	for i := range out {
		b := t.data[i*size:]
		switch t.dtype {
		case dtFloat:
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
		case dtInt32:
			out[i] = float64(int32(binary.LittleEndian.Uint32(b)))
		case dtInt64:
			out[i] = float64(int64(binary.LittleEndian.Uint64(b)))
		case dtDouble:
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(b))
		case dtFloat16:
			out[i] = float64(halfToFloat(binary.LittleEndian.Uint16(b)))
		}
	}
	return out, true
}

// halfToFloat widens an IEEE 754 half.
func halfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		f := float32(mant) / 1024 / 16384 // mant * 2^-24
		if sign != 0 {
			return -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

// encodeModel writes the model with nodes in place of the graph's, the
// initializers keep selects kept, extra added and the opsets set, copying
// every other field from the file.
func (f *onnxFile) encodeModel(nodes []*pbNode, keep func(*pbTensor) bool, extra []*pbTensor, opsets map[string]int64) ([]byte, error) {
	fh, err := os.Open(f.path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()

	var graph []span // file fields of the graph, in order
	var graphNew []byte
	for _, nd := range nodes {
		graphNew = protowire.AppendTag(graphNew, graphNode, protowire.BytesType)
		graphNew = protowire.AppendBytes(graphNew, nd.encode())
	}
	for _, t := range f.inits {
		if keep(t) {
			graph = append(graph, t.field)
		}
	}
	graph = append(graph, f.graphRest...)
	for _, t := range extra {
		graphNew = protowire.AppendTag(graphNew, graphInitializer, protowire.BytesType)
		graphNew = protowire.AppendBytes(graphNew, t.encode())
	}
	graphLen := int64(len(graphNew)) + spansLen(graph)

	head := f.head
	var opsetBytes []byte
	domains := make([]string, 0, len(opsets))
	for d := range opsets {
		domains = append(domains, d)
	}
	sort.Strings(domains)
	for _, d := range domains {
		var o []byte
		if d != "" {
			o = protowire.AppendTag(o, 1, protowire.BytesType)
			o = protowire.AppendString(o, d)
		}
		o = protowire.AppendTag(o, 2, protowire.VarintType)
		o = protowire.AppendVarint(o, uint64(opsets[d]))
		opsetBytes = protowire.AppendTag(opsetBytes, modelOpset, protowire.BytesType)
		opsetBytes = protowire.AppendBytes(opsetBytes, o)
	}
	graphTag := protowire.AppendTag(nil, modelGraph, protowire.BytesType)
	graphTag = protowire.AppendVarint(graphTag, uint64(graphLen))

	total := spansLen(head) + int64(len(opsetBytes)) + int64(len(graphTag)) + graphLen
	if total > math.MaxInt32 {
		return nil, fmt.Errorf("rewritten model of %d bytes is over protobuf's 2 GB", total)
	}
	out := make([]byte, 0, total)
	if out, err = appendSpans(out, fh, head); err != nil {
		return nil, err
	}
	out = append(out, opsetBytes...)
	out = append(out, graphTag...)
	out = append(out, graphNew...)
	if out, err = appendSpans(out, fh, graph); err != nil {
		return nil, err
	}
	if int64(len(out)) != total {
		return nil, fmt.Errorf("rewritten model: wrote %d of %d bytes", len(out), total)
	}
	return out, nil
}

func spansLen(ss []span) int64 {
	var n int64
	for _, s := range ss {
		n += s.n
	}
	return n
}

func appendSpans(out []byte, r io.ReaderAt, ss []span) ([]byte, error) {
	for _, s := range ss {
		start := len(out)
		out = out[:start+int(s.n)]
		if _, err := r.ReadAt(out[start:], s.off); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// encode writes a node: the bytes read for an unchanged one.
func (nd *pbNode) encode() []byte {
	if nd.raw != nil {
		return nd.raw
	}
	var b []byte
	for _, in := range nd.inputs {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, in)
	}
	for _, out := range nd.outputs {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, out)
	}
	b = appendStr(b, 3, nd.name)
	b = appendStr(b, 4, nd.op)
	for _, a := range nd.attrs {
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendBytes(b, a.encode())
	}
	b = appendStr(b, 7, nd.domain)
	return b
}

func (a pbAttr) encode() []byte {
	b := appendStr(nil, 1, a.name)
	switch a.typ {
	case attrFloat:
		b = protowire.AppendTag(b, 2, protowire.Fixed32Type)
		b = protowire.AppendFixed32(b, math.Float32bits(a.f))
	case attrInt:
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(a.i))
	case attrString:
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendBytes(b, a.s)
	case attrTensor:
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendBytes(b, a.t.encode())
	case attrGraph:
		b = protowire.AppendTag(b, 6, protowire.BytesType)
		b = protowire.AppendBytes(b, a.g)
	case attrInts:
		var p []byte
		for _, v := range a.ints {
			p = protowire.AppendVarint(p, uint64(v))
		}
		b = protowire.AppendTag(b, 8, protowire.BytesType)
		b = protowire.AppendBytes(b, p)
	}
	b = protowire.AppendTag(b, 20, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(a.typ))
}

// encode writes a new tensor with its data as raw_data.
func (t *pbTensor) encode() []byte {
	var b []byte
	if len(t.dims) > 0 {
		var p []byte
		for _, d := range t.dims {
			p = protowire.AppendVarint(p, uint64(d))
		}
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, p)
	}
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(t.dtype))
	b = appendStr(b, 8, t.name)
	b = protowire.AppendTag(b, 9, protowire.BytesType)
	return protowire.AppendBytes(b, t.data)
}

func appendStr(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}
