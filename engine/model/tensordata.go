package model

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
)

// maxWeight bounds the weight tensor the int8 rewrite reads (elements): a
// BGE-M3 linear layer has 4M; a header claiming more than 1G is refused
// before anything is allocated.
const maxWeight = 1 << 30

// tensorFloats returns an initializer's values as float32 (it must be
// float or float16): from the data read with it, else from its field in
// the model file, else from its external data file.
func (f *onnxFile) tensorFloats(t *pbTensor) ([]float32, error) {
	n := numel(t.dims)
	if n < 0 || n > maxWeight {
		return nil, fmt.Errorf("dims %v", t.dims)
	}
	size := int64(4)
	if t.dtype == dtFloat16 {
		size = 2
	} else if t.dtype != dtFloat {
		return nil, fmt.Errorf("element type %d (want float or float16)", t.dtype)
	}
	want := n * size
	raw := t.data
	if !t.hasData || t.external || int64(len(raw)) != want {
		var err error
		if raw, err = f.tensorBytes(t, want); err != nil {
			return nil, err
		}
	}
	if int64(len(raw)) != want {
		return nil, fmt.Errorf("%d bytes of data for dims %v", len(raw), t.dims)
	}
	out := make([]float32, n)
	for i := range out {
		if size == 2 {
			out[i] = halfToFloat(binary.LittleEndian.Uint16(raw[2*i:]))
		} else {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	}
	return out, nil
}

// tensorBytes reads the data of a tensor too large to have been read with
// the graph: its raw_data in the model file, or its external data.
func (f *onnxFile) tensorBytes(t *pbTensor, want int64) ([]byte, error) {
	fh, err := os.Open(f.path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	if t.field.n <= 0 || t.field.n > want+maxValueInfoSize {
		return nil, fmt.Errorf("a tensor field of %d bytes for %d bytes of data", t.field.n, want)
	}
	field := make([]byte, t.field.n)
	if _, err := fh.ReadAt(field, t.field.off); err != nil {
		return nil, err
	}
	_, _, n := protowire.ConsumeTag(field)
	if n < 0 {
		return nil, protowire.ParseError(n)
	}
	body, m := protowire.ConsumeBytes(field[n:])
	if m < 0 {
		return nil, protowire.ParseError(m)
	}
	var raw []byte
	ext := map[string]string{}
	err = pbFields(body, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch {
		case num == 9 && typ == protowire.BytesType:
			raw = v
		case num == 13 && typ == protowire.BytesType:
			var key, val string
			if err := pbFields(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if typ == protowire.BytesType && num == entryKey {
					key = string(v)
				} else if typ == protowire.BytesType && num == entryValue {
					val = string(v)
				}
				return nil
			}); err != nil {
				return err
			}
			ext[key] = val
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !t.external {
		return raw, nil
	}
	return f.externalBytes(ext, want)
}

// externalBytes reads want bytes of external data: location (a path
// inside the model's directory), offset and length as the entries say.
func (f *onnxFile) externalBytes(ext map[string]string, want int64) ([]byte, error) {
	loc := ext["location"]
	if loc == "" || !filepath.IsLocal(loc) {
		return nil, fmt.Errorf("external data location %q is not a path inside the model's directory", loc)
	}
	var off, length int64
	var err error
	if s := ext["offset"]; s != "" {
		if off, err = strconv.ParseInt(s, 10, 64); err != nil || off < 0 {
			return nil, fmt.Errorf("external data offset %q", s)
		}
	}
	length = want
	if s := ext["length"]; s != "" {
		if length, err = strconv.ParseInt(s, 10, 64); err != nil || length != want {
			return nil, fmt.Errorf("external data length %q for %d bytes", s, want)
		}
	}
	fh, err := os.Open(filepath.Join(filepath.Dir(f.path), loc))
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	out := make([]byte, length)
	if _, err := fh.ReadAt(out, off); err != nil {
		if err == io.EOF {
			return nil, fmt.Errorf("external data %s: %d bytes at %d run past its end", loc, length, off)
		}
		return nil, err
	}
	return out, nil
}
