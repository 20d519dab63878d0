package schema

import (
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// value decodes one opaque value: nil, bool, int64 (uint64 above
// math.MaxInt64), float32, float64, string, []byte, []any or map[string]any.
// Integers are normalized to int64 so a value decodes to the same Go type
// whatever width encoded it, which keeps a decode-encode-decode round trip
// stable. Extension types and maps with non-string keys are refused: meta
// must also survive JSON.
//
// With discard set the value is consumed and nil returned, allocating
// nothing for strings and containers.
func (r reader) value(depth int, discard bool) (any, error) {
	if depth > maxDepth {
		return nil, errTooDeep
	}
	c, err := r.peek()
	if err != nil {
		return nil, err
	}
	switch {
	case c == msgpcode.Nil:
		return nil, r.dec.DecodeNil()
	case c == msgpcode.True || c == msgpcode.False:
		return r.dec.DecodeBool()
	case isInt(c):
		if c == msgpcode.Uint64 {
			u, err := r.dec.DecodeUint64()
			if err != nil || u > math.MaxInt64 {
				return u, err
			}
			return int64(u), nil
		}
		return r.dec.DecodeInt64()
	case c == msgpcode.Float:
		return r.dec.DecodeFloat32()
	case c == msgpcode.Double:
		return r.dec.DecodeFloat64()
	case msgpcode.IsString(c) || msgpcode.IsBin(c):
		if discard {
			return nil, r.discardBytes()
		}
		b, err := r.bytes()
		if err != nil {
			return nil, err
		}
		if msgpcode.IsString(c) {
			return string(b), nil
		}
		if b == nil {
			b = []byte{}
		}
		return b, nil
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		return r.array(depth, discard)
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		return r.object(depth, discard)
	}
	return nil, fmt.Errorf("unsupported msgpack code 0x%02x", c)
}

func (r reader) array(depth int, discard bool) (any, error) {
	n, err := r.arrayLen(1)
	if err != nil {
		return nil, err
	}
	var out []any
	if !discard {
		out = make([]any, 0, min(n, r.left()))
	}
	for range n {
		v, err := r.value(depth+1, discard)
		if err != nil {
			return nil, err
		}
		if !discard {
			out = append(out, v)
		}
	}
	if discard {
		return nil, nil
	}
	return out, nil
}

func (r reader) object(depth int, discard bool) (any, error) {
	n, err := r.mapLen()
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if !discard {
		out = make(map[string]any, min(n, r.left()/2))
	}
	var keys keySet
	for range n {
		c, err := r.peek()
		if err != nil {
			return nil, err
		}
		if !msgpcode.IsString(c) {
			return nil, fmt.Errorf("map key must be a string, got code 0x%02x", c)
		}
		k, err := r.str()
		if err != nil {
			return nil, err
		}
		if keys.add(k) {
			return nil, fmt.Errorf("key %s given twice", quoteShort(k))
		}
		v, err := r.value(depth+1, discard)
		if err != nil {
			return nil, err
		}
		if !discard {
			out[k] = v
		}
	}
	if discard {
		return nil, nil
	}
	return out, nil
}

// discardBytes consumes a str or bin without keeping it.
func (r reader) discardBytes() error {
	n, err := r.dec.DecodeBytesLen()
	if err != nil || n <= 0 {
		return err
	}
	if known, ok := remaining(r.dec); ok && n > known {
		return fmt.Errorf("string of %d bytes exceeds the %d bytes left", n, known)
	}
	var buf [512]byte
	for n > 0 {
		k := min(n, len(buf))
		if err := r.dec.ReadFull(buf[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}
