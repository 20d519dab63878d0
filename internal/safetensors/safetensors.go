package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
)

// Tensor is a dense tensor converted to float32.
type Tensor struct {
	Shape []int
	Data  []float32
}

type headerEntry struct {
	Dtype   string   `json:"dtype"`
	Shape   []int    `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

// maxHeader bounds the JSON header so a corrupt file cannot ask for GiBs.
const maxHeader = 100 << 20

// ReadFile reads every tensor of a safetensors file. F32, F16 and BF16 are
// converted to float32; other dtypes are an error naming the tensor.
func ReadFile(path string) (map[string]Tensor, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	return m, nil
}

// Read reads every tensor from r.
func Read(r io.Reader) (map[string]Tensor, error) {
	var n uint64
	if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
		return nil, fmt.Errorf("read header length: %w", err)
	}
	if n == 0 || n > maxHeader {
		return nil, fmt.Errorf("header length %d out of range", n)
	}
	hb := make([]byte, n)
	if _, err := io.ReadFull(r, hb); err != nil {
		return nil, fmt.Errorf("read header: %w", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hb, &raw); err != nil {
		return nil, fmt.Errorf("parse header: %w", err)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Tensor, len(raw))
	for name, msg := range raw {
		if name == "__metadata__" {
			continue
		}
		var e headerEntry
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		count := 1
		for _, d := range e.Shape {
			if d < 0 {
				return nil, fmt.Errorf("tensor %q: negative dimension", name)
			}
			count *= d
		}
		lo, hi := e.Offsets[0], e.Offsets[1]
		if lo < 0 || hi < lo || hi > int64(len(data)) {
			return nil, fmt.Errorf("tensor %q: data offsets [%d,%d) outside %d bytes", name, lo, hi, len(data))
		}
		b := data[lo:hi]
		vals, err := decode(e.Dtype, b, count)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		out[name] = Tensor{Shape: e.Shape, Data: vals}
	}
	return out, nil
}

func decode(dtype string, b []byte, count int) ([]float32, error) {
	size := map[string]int{"F32": 4, "F16": 2, "BF16": 2}[dtype]
	if size == 0 {
		return nil, fmt.Errorf("unsupported dtype %s", dtype)
	}
	if len(b) != count*size {
		return nil, fmt.Errorf("%d bytes for %d %s values", len(b), count, dtype)
	}
	out := make([]float32, count)
	for i := range out {
		switch dtype {
		case "F32":
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		case "F16":
			out[i] = HalfToFloat(binary.LittleEndian.Uint16(b[2*i:]))
		case "BF16":
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
		}
	}
	return out, nil
}

// WriteFile writes tensors as F32 in name order, so output is reproducible.
func WriteFile(path string, tensors map[string]Tensor) error {
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	header := make(map[string]headerEntry, len(names))
	var off int64
	for _, n := range names {
		t := tensors[n]
		count := 1
		for _, d := range t.Shape {
			count *= d
		}
		if count != len(t.Data) {
			return fmt.Errorf("safetensors: tensor %q: shape %v holds %d values, have %d", n, t.Shape, count, len(t.Data))
		}
		header[n] = headerEntry{Dtype: "F32", Shape: t.Shape, Offsets: [2]int64{off, off + int64(4*count)}}
		off += int64(4 * count)
	}
	hb, err := json.Marshal(header) // encoding/json sorts map keys
	if err != nil {
		return err
	}
	for len(hb)%8 != 0 { // the format recommends an 8-byte aligned data start
		hb = append(hb, ' ')
	}
	buf := make([]byte, 8, 8+len(hb)+int(off))
	binary.LittleEndian.PutUint64(buf, uint64(len(hb)))
	buf = append(buf, hb...)
	for _, n := range names {
		for _, v := range tensors[n].Data {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
		}
	}
	return errors.Join(os.WriteFile(path, buf, 0o644))
}

// HalfToFloat converts an IEEE 754 half-precision value to float32.
func HalfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0 && frac == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal
		e := uint32(127 - 15 + 1)
		for frac&0x400 == 0 {
			frac <<= 1
			e--
		}
		frac &= 0x3ff
		return math.Float32frombits(sign | e<<23 | frac<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | frac<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | frac<<13)
}
