package model

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"

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
	dtUint8   = 2
	dtInt8    = 3
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
		case num == fieldOpset && typ == protowire.BytesType:
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
	fieldOpset       = 8
	fieldNode        = 1
	fieldInitializer = 5
	fieldValueInfo   = 13
)

func (f *onnxFile) readGraph(r *pbReader, size int64) error {
	return r.walk(size, func(num protowire.Number, typ protowire.Type, at span, n int64) error {
		if typ != protowire.BytesType {
			f.graphRest = append(f.graphRest, at)
			return nil
		}
		switch num {
		case fieldNode:
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
		case fieldInitializer:
			t, err := readTensor(r, n)
			if err != nil {
				return fmt.Errorf("initializer: %w", err)
			}
			t.field = at
			f.inits = append(f.inits, t)
			return nil
		case graphInput, graphOutput, fieldValueInfo:
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
		if r.off > end {
			return fmt.Errorf("a field tag overruns its message at offset %d", start)
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
			// The length's own varint may already have run past the end
			// (end-r.off negative, which as a uint64 would admit any u).
			if r.off > end || u > uint64(end-r.off) {
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
	if n < 0 {
		return nil, fmt.Errorf("a field of %d bytes at offset %d", n, r.off)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return b, err
}
