package model

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of onnx.proto used here.
const (
	modelGraph       = 7  // ModelProto.graph
	graphInput       = 11 // GraphProto.input
	graphOutput      = 12 // GraphProto.output
	valueInfoName    = 1  // ValueInfoProto.name
	maxValueInfoSize = 1 << 20
)

// ReadGraph reads the input and output names of the ONNX model at path. It
// streams the protobuf and seeks over everything else (initializers, nodes),
// so a multi-GB model with inline weights costs a few reads, and external
// data files are never opened.
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
	var g Graph
	found := false
	err = r.fields(st.Size(), func(num protowire.Number, n int64) error {
		if num != modelGraph {
			return r.skip(n)
		}
		found = true
		return r.fields(n, func(num protowire.Number, n int64) error {
			if num != graphInput && num != graphOutput {
				return r.skip(n)
			}
			if n > maxValueInfoSize {
				return fmt.Errorf("value info of %d bytes", n)
			}
			b := make([]byte, n)
			if _, err := io.ReadFull(r, b); err != nil {
				return err
			}
			name, err := valueInfoNameOf(b)
			if err != nil {
				return err
			}
			if num == graphInput {
				g.Inputs = append(g.Inputs, name)
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
	return g, nil
}

func valueInfoNameOf(b []byte) (string, error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", protowire.ParseError(n)
		}
		b = b[n:]
		if num == valueInfoName && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return "", protowire.ParseError(n)
			}
			return string(v), nil
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return "", protowire.ParseError(n)
		}
		b = b[n:]
	}
	return "", errors.New("value info without a name")
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
