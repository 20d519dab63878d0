package model

import (
	"encoding/binary"
	"errors"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// pbFields calls fn for every field of the message b.
func pbFields(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, u uint64) error) error {
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
	err = pbFields(b, func(num protowire.Number, typ protowire.Type, v []byte, u uint64) error {
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
	err := pbFields(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
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
	err := pbFields(b, func(num protowire.Number, typ protowire.Type, v []byte, u uint64) error {
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
	err := pbFields(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num != fieldNode || typ != protowire.BytesType {
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
	err := pbFields(b, func(num protowire.Number, typ protowire.Type, v []byte, u uint64) error {
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
	err := pbFields(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			vi.name = string(v)
		case num == 2 && typ == protowire.BytesType:
			return pbFields(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
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
	return pbFields(b, func(num protowire.Number, typ protowire.Type, v []byte, u uint64) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			vi.elem = int32(u)
		case num == 2 && typ == protowire.BytesType:
			vi.hasShape = true
			return pbFields(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if num != 1 || typ != protowire.BytesType {
					return nil
				}
				d := int64(-1)
				err := pbFields(v, func(num protowire.Number, typ protowire.Type, _ []byte, u uint64) error {
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
