package schema

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// maxDepth bounds the nesting of opaque values (meta, unknown fields). The
// msgpack library's own Skip and DecodeInterface recurse without a limit,
// and a payload of nested one-byte arrays would otherwise exhaust the stack.
const maxDepth = 64

// unknownLeft stands for the bytes left in a stream of unknown length: it
// caps the capacity preallocated from a length header; slices then grow as
// elements actually arrive.
const unknownLeft = 1 << 12

var errTooDeep = errors.New("nesting deeper than 64 levels")

// reader decodes the wire types by hand on top of a msgpack.Decoder. The
// library's reflective decoder trusts length headers (a bin of 2^31 values
// or an array of 2^31 strings is allocated before a byte is read); reader
// checks every length against the bytes left, so allocation stays
// proportional to the payload, and it rejects values of the wrong type.
type reader struct {
	dec *msgpack.Decoder
}

// left returns the bytes not yet read, or unknownLeft for streams.
func (r reader) left() int {
	if n, ok := remaining(r.dec); ok {
		return n
	}
	return unknownLeft
}

// offset returns how many bytes of the message were read, when the decoder
// reads from memory (ok is false for streams).
func (r reader) offset() (int64, bool) {
	br, ok := r.dec.Buffered().(*bytes.Reader)
	if !ok {
		return 0, false
	}
	return br.Size() - int64(br.Len()), true
}

// rawFrom copies the bytes read since offset start (see [reader.offset]).
func (r reader) rawFrom(start int64) []byte {
	end, _ := r.offset()
	b := make([]byte, end-start)
	_, _ = r.dec.Buffered().(*bytes.Reader).ReadAt(b, start)
	return b
}

// peek returns the next code without consuming it.
func (r reader) peek() (byte, error) { return r.dec.PeekCode() }

// isNil consumes a nil and reports whether there was one.
func (r reader) isNil() (bool, error) {
	c, err := r.peek()
	if err != nil {
		return false, err
	}
	if c != msgpcode.Nil {
		return false, nil
	}
	return true, r.dec.DecodeNil()
}

// arrayLen reads an array header; nil reads as -1. perElem is the fewest
// bytes one element takes on the wire.
func (r reader) arrayLen(perElem int) (int, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	if c != msgpcode.Nil && !msgpcode.IsFixedArray(c) && c != msgpcode.Array16 && c != msgpcode.Array32 {
		return 0, fmt.Errorf("want array, got code 0x%02x", c)
	}
	n, err := r.dec.DecodeArrayLen()
	if err != nil {
		return 0, err
	}
	if known, ok := remaining(r.dec); ok && n > 0 && n > known/perElem {
		return 0, fmt.Errorf("array of %d elements exceeds the %d bytes left", n, known)
	}
	return n, nil
}

// mapLen reads a map header; nil reads as -1.
func (r reader) mapLen() (int, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	if c != msgpcode.Nil && !msgpcode.IsFixedMap(c) && c != msgpcode.Map16 && c != msgpcode.Map32 {
		return 0, fmt.Errorf("want map, got code 0x%02x", c)
	}
	n, err := r.dec.DecodeMapLen()
	if err != nil {
		return 0, err
	}
	if known, ok := remaining(r.dec); ok && n > 0 && n > known/2 {
		return 0, fmt.Errorf("map of %d entries exceeds the %d bytes left", n, known)
	}
	return n, nil
}

// str reads a string (nil reads as ""). A bin is accepted too, since some
// msgpack encoders send byte strings that way; invalid UTF-8 is caught by
// validation, per text. The bytes are read into one allocation that becomes
// the string.
func (r reader) str() (string, error) {
	c, err := r.peek()
	if err != nil {
		return "", err
	}
	if c != msgpcode.Nil && !msgpcode.IsString(c) && !msgpcode.IsBin(c) {
		return "", fmt.Errorf("want string, got code 0x%02x", c)
	}
	b, err := r.bytes()
	if err != nil || len(b) == 0 {
		return "", err
	}
	return unsafe.String(&b[0], len(b)), nil
}

// bytes reads a str or bin body into a new slice; nil reads as nil.
func (r reader) bytes() ([]byte, error) {
	n, err := r.dec.DecodeBytesLen()
	if err != nil || n < 0 {
		return nil, err
	}
	if known, ok := remaining(r.dec); ok && n > known {
		return nil, fmt.Errorf("string of %d bytes exceeds the %d bytes left", n, known)
	}
	if n > unknownLeft {
		if _, ok := remaining(r.dec); !ok {
			return r.bytesChunked(n)
		}
	}
	b := make([]byte, n)
	if err := r.dec.ReadFull(b); err != nil {
		return nil, err
	}
	return b, nil
}

func (r reader) bytesChunked(n int) ([]byte, error) {
	b := make([]byte, 0, unknownLeft)
	for len(b) < n {
		k := min(n-len(b), max(len(b), unknownLeft))
		b = slices.Grow(b, k)[:len(b)+k]
		if err := r.dec.ReadFull(b[len(b)-k:]); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// integer reads an integer of any msgpack width; floats are refused.
func (r reader) integer() (int64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	if !isInt(c) {
		return 0, fmt.Errorf("want integer, got code 0x%02x", c)
	}
	if c == msgpcode.Uint64 {
		u, err := r.dec.DecodeUint64()
		if err != nil {
			return 0, err
		}
		if u > math.MaxInt64 {
			return 0, fmt.Errorf("integer %d out of range", u)
		}
		return int64(u), nil
	}
	return r.dec.DecodeInt64()
}

func isInt(c byte) bool {
	if msgpcode.IsFixedNum(c) {
		return true
	}
	switch c {
	case msgpcode.Uint8, msgpcode.Uint16, msgpcode.Uint32, msgpcode.Uint64,
		msgpcode.Int8, msgpcode.Int16, msgpcode.Int32, msgpcode.Int64:
		return true
	}
	return false
}

// boolean reads a bool; nil is refused so that a caller can tell absent
// (nil) from false.
func (r reader) boolean() (bool, error) {
	c, err := r.peek()
	if err != nil {
		return false, err
	}
	if c != msgpcode.True && c != msgpcode.False {
		return false, fmt.Errorf("want bool, got code 0x%02x", c)
	}
	return r.dec.DecodeBool()
}

// strings reads an array of strings; nil reads as nil.
func (r reader) strings() ([]string, error) {
	n, err := r.arrayLen(1)
	if err != nil || n < 0 {
		return nil, err
	}
	out := make([]string, 0, min(n, r.left()))
	for range n {
		s, err := r.str()
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// skip consumes one value of any type, with bounded nesting.
func (r reader) skip() error {
	_, err := r.value(0, true)
	return err
}

// meta reads an opaque map with string keys; nil reads as nil.
func (r reader) meta() (map[string]any, error) {
	if isNil, err := r.isNil(); err != nil || isNil {
		return nil, err
	}
	v, err := r.value(0, false)
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("meta must be a map, got %T", v)
	}
	return m, nil
}
