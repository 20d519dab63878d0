package schema

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
)

// Vector is a float32 vector. In msgpack it travels as one bin holding the
// values as little-endian IEEE 754 binary32, 4 bytes a value with no
// per-value tags (bin 8/16/32 header, then 4*len bytes); nil is msgpack nil.
// In JSON it is an array of numbers.
//
// Encoding and decoding copy the values in one block: decoding allocates
// the vector once and nothing per value.
type Vector []float32

// hostLittleEndian selects the zero-copy path: on little-endian hosts the
// in-memory layout of a []float32 is already the wire layout.
var hostLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// maxVectorBytes keeps a bin length a multiple of 4 that fits bin 32.
const maxVectorBytes = math.MaxUint32 &^ 3

// EncodeMsgpack writes v as a bin of little-endian float32.
func (v Vector) EncodeMsgpack(enc *msgpack.Encoder) error {
	if v == nil {
		return enc.EncodeNil()
	}
	if uint64(len(v))*4 > maxVectorBytes {
		return fmt.Errorf("vector of %d values is too long for msgpack bin", len(v))
	}
	if err := enc.EncodeBytesLen(4 * len(v)); err != nil {
		return err
	}
	if len(v) == 0 {
		return nil
	}
	w := enc.Writer()
	if hostLittleEndian {
		_, err := w.Write(unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)))
		return err
	}
	var buf [1024]byte
	for len(v) > 0 {
		n := min(len(v), len(buf)/4)
		for i, f := range v[:n] {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(f))
		}
		if _, err := w.Write(buf[:4*n]); err != nil {
			return err
		}
		v = v[n:]
	}
	return nil
}

// DecodeMsgpack reads a bin of little-endian float32 into v. The bin length
// must be a multiple of 4 and, when the input is an in-memory buffer, no
// larger than what is left of it, so a forged length cannot allocate more
// than the payload holds.
func (v *Vector) DecodeMsgpack(dec *msgpack.Decoder) error {
	n, err := dec.DecodeBytesLen()
	if err != nil {
		return err
	}
	if n < 0 {
		*v = nil
		return nil
	}
	if n%4 != 0 {
		return fmt.Errorf("vector bin of %d bytes is not a multiple of 4", n)
	}
	if left, ok := remaining(dec); ok && n > left {
		return fmt.Errorf("vector bin of %d bytes exceeds the %d bytes left", n, left)
	}
	if n == 0 {
		*v = Vector{}
		return nil
	}
	if !hostLittleEndian || !knownSize(dec) {
		return v.decodeChunked(dec, n/4)
	}
	out := make(Vector, n/4)
	if err := dec.ReadFull(unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), n)); err != nil {
		return err
	}
	*v = out
	return nil
}

// decodeChunked reads count values through a stack buffer. It serves
// big-endian hosts and streams of unknown length, where the vector grows as
// data actually arrives instead of trusting the length header.
func (v *Vector) decodeChunked(dec *msgpack.Decoder, count int) error {
	out := make(Vector, 0, min(count, 1<<14))
	var buf [1024]byte
	for count > 0 {
		n := min(count, len(buf)/4)
		if err := dec.ReadFull(buf[:4*n]); err != nil {
			return err
		}
		for i := range n {
			out = append(out, math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:])))
		}
		count -= n
	}
	*v = out
	return nil
}

// remaining returns how many bytes are left in the decoder's input when it
// reads from an in-memory buffer (bytes.Reader, as msgpack.Unmarshal and
// this package use), and ok=false for other readers.
func remaining(dec *msgpack.Decoder) (int, bool) {
	if l, ok := dec.Buffered().(interface{ Len() int }); ok {
		return l.Len(), true
	}
	return 0, false
}

func knownSize(dec *msgpack.Decoder) bool {
	_, ok := remaining(dec)
	return ok
}
