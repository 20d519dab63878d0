package model

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of onnx.proto used here.
const (
	modelGraph        = 7  // ModelProto.graph
	graphInitializer  = 5  // GraphProto.initializer
	graphInput        = 11 // GraphProto.input
	graphOutput       = 12 // GraphProto.output
	valueInfoName     = 1  // ValueInfoProto.name
	valueInfoType     = 2  // ValueInfoProto.type
	typeTensor        = 1  // TypeProto.tensor_type
	tensorTypeElem    = 1  // TypeProto.Tensor.elem_type
	tensorName        = 8  // TensorProto.name
	tensorExternal    = 13 // TensorProto.external_data
	entryKey          = 1  // StringStringEntryProto.key
	entryValue        = 2  // StringStringEntryProto.value
	maxValueInfoSize  = 1 << 20
	maxTensorNameSize = 64 << 10
)

// ReadGraph reads the interface of the ONNX model at path: its input and
// output names and element types, and the external data files its
// initializers name. It streams the protobuf and seeks over everything
// else (weights, nodes), so a multi-GB model with inline weights costs a
// few reads, and external data files are never opened.
func ReadGraph(path string) (Graph, error) {
	f, err := os.Open(path)
	if err != nil {
		return Graph{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Graph{}, err
	}
	r := &pbReader{f: f, br: bufio.NewReaderSize(f, 64<<10)}
	g := Graph{Types: map[string]ElemType{}}
	var inputs []string
	inits := map[string]bool{}
	found := false
	err = r.fields(st.Size(), func(num protowire.Number, n int64) error {
		if num != modelGraph {
			return r.skip(n)
		}
		found = true
		return r.fields(n, func(num protowire.Number, n int64) error {
			switch num {
			case graphInitializer:
				name, loc, err := r.initializer(n)
				if err != nil {
					return err
				}
				inits[name] = true
				if loc != "" && !slices.Contains(g.External, loc) {
					g.External = append(g.External, loc)
				}
				return nil
			case graphInput, graphOutput:
			default:
				return r.skip(n)
			}
			if n > maxValueInfoSize {
				return fmt.Errorf("value info of %d bytes", n)
			}
			b := make([]byte, n)
			if _, err := io.ReadFull(r, b); err != nil {
				return err
			}
			name, elem, err := valueInfoOf(b)
			if err != nil {
				return err
			}
			if elem != 0 {
				g.Types[name] = elem
			}
			if num == graphInput {
				inputs = append(inputs, name)
			} else {
				g.Outputs = append(g.Outputs, name)
			}
			return nil
		})
	})
	if err != nil {
		return Graph{}, fmt.Errorf("%w: %s: not an ONNX model: %w", ErrInvalid, path, err)
	}
	if !found {
		return Graph{}, fmt.Errorf("%w: %s: no graph", ErrInvalid, path)
	}
	// Exports of IR version < 4 list every initializer as an input too:
	// those have values, only the rest must be fed.
	for _, in := range inputs {
		if !inits[in] {
			g.Inputs = append(g.Inputs, in)
		}
	}
	return g, nil
}

// valueInfoOf reads a ValueInfoProto's name and, for a tensor, its element
// type (0 when it has none).
func valueInfoOf(b []byte) (name string, elem ElemType, err error) {
	named := false
	err = eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case num == valueInfoName && typ == protowire.BytesType:
			name, named = string(v), true
		case num == valueInfoType && typ == protowire.BytesType:
			return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				if num != typeTensor || typ != protowire.BytesType {
					return nil
				}
				return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
					if num == tensorTypeElem && typ == protowire.VarintType {
						x, _ := protowire.ConsumeVarint(v)
						elem = ElemType(x)
					}
					return nil
				})
			})
		}
		return nil
	})
	if err == nil && !named {
		err = errors.New("value info without a name")
	}
	return name, elem, err
}

// eachField calls fn with every field of the message b: a varint's bytes,
// or a length-delimited field's payload.
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		v := b[:n]
		if typ == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(v)
		}
		if err := fn(num, typ, v); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// initializer reads a TensorProto's name and the location of its external
// data ("" when it is inline), seeking over the weights.
func (r *pbReader) initializer(size int64) (name, location string, err error) {
	err = r.fields(size, func(num protowire.Number, n int64) error {
		switch num {
		case tensorName, tensorExternal:
		default:
			return r.skip(n)
		}
		if n > maxTensorNameSize {
			return fmt.Errorf("initializer field %d of %d bytes", num, n)
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return err
		}
		if num == tensorName {
			name = string(b)
			return nil
		}
		var key, val string
		if err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
			if typ == protowire.BytesType && num == entryKey {
				key = string(v)
			} else if typ == protowire.BytesType && num == entryValue {
				val = string(v)
			}
			return nil
		}); err != nil {
			return err
		}
		if key == "location" {
			location = val
		}
		return nil
	})
	return name, location, err
}

// pbReader walks protobuf fields from a file, seeking over large ones.
type pbReader struct {
	f   *os.File
	br  *bufio.Reader
	off int64 // file offset of the next byte br returns
}

func (r *pbReader) Read(p []byte) (int, error) {
	n, err := r.br.Read(p)
	r.off += int64(n)
	return n, err
}

func (r *pbReader) ReadByte() (byte, error) {
	b, err := r.br.ReadByte()
	if err == nil {
		r.off++
	}
	return b, err
}

func (r *pbReader) skip(n int64) error {
	if n <= int64(r.br.Buffered()) {
		_, err := r.br.Discard(int(n))
		r.off += n
		return err
	}
	if _, err := r.f.Seek(r.off+n, io.SeekStart); err != nil {
		return err
	}
	r.off += n
	r.br.Reset(r.f)
	return nil
}

// fields calls fn for each length-delimited field in the next size bytes,
// positioned at the field's payload of n bytes; fn must consume exactly n.
// Scalar fields are skipped.
func (r *pbReader) fields(size int64, fn func(num protowire.Number, n int64) error) error {
	end := r.off + size
	for r.off < end {
		tag, err := binary.ReadUvarint(r)
		if err != nil {
			return err
		}
		num, typ := protowire.DecodeTag(tag)
		if num <= 0 {
			return fmt.Errorf("bad field number %d at offset %d", num, r.off)
		}
		switch typ {
		case protowire.VarintType:
			_, err = binary.ReadUvarint(r)
		case protowire.Fixed64Type:
			err = r.skip(8)
		case protowire.Fixed32Type:
			err = r.skip(4)
		case protowire.BytesType:
			var n uint64
			if n, err = binary.ReadUvarint(r); err != nil {
				return err
			}
			if int64(n) < 0 || r.off+int64(n) > end {
				return fmt.Errorf("field %d of %d bytes overruns its message at offset %d", num, n, r.off)
			}
			start := r.off
			if err = fn(num, int64(n)); err == nil && r.off != start+int64(n) {
				err = fmt.Errorf("field %d: read %d of %d bytes", num, r.off-start, n)
			}
		default:
			err = fmt.Errorf("unsupported wire type %d for field %d", typ, num)
		}
		if err != nil {
			return err
		}
	}
	if r.off != end {
		return fmt.Errorf("message overruns its length by %d bytes", r.off-end)
	}
	return nil
}
