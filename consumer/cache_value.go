package consumer

import (
	"crypto/sha256"
	"encoding/binary"
	"hash/crc32"
	"math"

	"github.com/jetembed/jetembed/engine"
)

// A cache value is one text's [engine.Embedding] as the engine made it, so
// that a cached text goes through the same assembly, and encodes to the
// same bytes, as a computed one. Its layout (version 1, little endian):
//
//	"JEC" 0x01                magic and version
//	[32]byte                  the key's digest: a value stored under
//	                          another key (another text, model, precision,
//	                          tenant, outputs or truncation) is foreign
//	u8 flags                  bit 0: truncated
//	u32 tokens
//	u32 n, n x f32            dense
//	u32 n, n x u32, n x f32   sparse ids (ascending), weights
//	u32 dim, u32 rows, rows x dim x f32   ColBERT
//	u32 crc32c                of everything before it
//
// Anything else — a short or long value, another magic or version, a bad
// checksum, a length that does not fit, unsorted sparse ids — is not an
// answer: the text is computed, as for a key the cache does not have.

// Why a value read from the cache was not used (the reason label of
// jetembed_cache_misses_total).
const (
	missAbsent      = "absent"      // no value under the key
	missCorrupt     = "corrupt"     // not a value this version wrote, or damaged
	missForeign     = "foreign"     // a valid value of another key
	missOversized   = "oversized"   // over the largest value the loop accepts
	missUnavailable = "unavailable" // the cache could not be asked
)

var (
	cacheMagic = [4]byte{'J', 'E', 'C', 1}
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

const (
	valueHeader = 4 + sha256.Size + 1 + 4 // magic, digest, flags, tokens
	valueCRC    = 4
)

// encodeValue is e's cache value under key k.
func encodeValue(k cacheKey, e *engine.Embedding) []byte {
	rows := 0
	if e.ColBERTDim > 0 {
		rows = len(e.ColBERT) / e.ColBERTDim
	}
	n := valueHeader + 4 + 4*len(e.Dense) + 4 + 8*len(e.SparseIDs) + 8 + 4*rows*e.ColBERTDim + valueCRC
	b := make([]byte, 0, n)
	b = append(b, cacheMagic[:]...)
	b = append(b, k[:]...)
	flags := byte(0)
	if e.Truncated {
		flags = 1
	}
	b = append(b, flags)
	b = binary.LittleEndian.AppendUint32(b, uint32(e.Tokens))
	b = appendFloats(b, e.Dense)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(e.SparseIDs)))
	for _, id := range e.SparseIDs {
		b = binary.LittleEndian.AppendUint32(b, id)
	}
	for _, w := range e.SparseWeights[:len(e.SparseIDs)] {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(w))
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(max(e.ColBERTDim, 0)))
	b = binary.LittleEndian.AppendUint32(b, uint32(rows))
	for _, f := range e.ColBERT[:rows*max(e.ColBERTDim, 0)] {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func appendFloats(b []byte, v []float32) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
	for _, f := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	return b
}

// cacheable reports whether e may be stored: a result without an error,
// whose parts agree (the engine's always do; a value is checked anyway,
// since it is read back by every member of the fleet) and whose vectors
// are finite (one that is not would be refused by every reader, see
// plausible, and rewritten on every run).
func cacheable(e *engine.Embedding) bool {
	return e.Err == nil && e.Tokens >= 0 && len(e.SparseWeights) == len(e.SparseIDs) &&
		(e.ColBERTDim > 0 || len(e.ColBERT) == 0) && (e.ColBERTDim <= 0 || len(e.ColBERT)%e.ColBERTDim == 0) &&
		finite(e.Dense) && finite(e.SparseWeights) && finite(e.ColBERT)
}

// finite reports whether v holds no NaN or infinity.
func finite(v []float32) bool {
	for _, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return false
		}
	}
	return true
}

// decodeValue returns the embedding a value of key k holds, or the reason
// it holds none (one of the miss* constants). It reads data only within
// its bounds, allocates no more than data's size, and keeps no reference
// to data.
func decodeValue(k cacheKey, data []byte, want engine.Output, maxBytes int) (engine.Embedding, string) {
	var e engine.Embedding
	if maxBytes > 0 && len(data) > maxBytes {
		return e, missOversized
	}
	if len(data) < valueHeader+valueCRC || [4]byte(data[:4]) != cacheMagic {
		return e, missCorrupt
	}
	body := data[:len(data)-valueCRC]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(data[len(body):]) {
		return e, missCorrupt
	}
	if [sha256.Size]byte(body[4:4+sha256.Size]) != k {
		return e, missForeign
	}
	r := valueReader{b: body[4+sha256.Size:]}
	flags := r.byte()
	e.Truncated = flags&1 != 0
	e.Tokens = int(r.u32())
	e.Dense = r.floats(int(r.u32()))
	if n := int(r.u32()); n > 0 && r.fits(8*n) {
		e.SparseIDs = make([]uint32, n)
		for i := range e.SparseIDs {
			e.SparseIDs[i] = r.u32()
			if i > 0 && e.SparseIDs[i] <= e.SparseIDs[i-1] {
				r.bad = true
			}
		}
		e.SparseWeights = r.floats(n)
	} else if n > 0 {
		r.bad = true
	}
	dim, rows := int(r.u32()), int(r.u32())
	if dim > 0 && rows > 0 {
		if rows > len(r.b)/4/dim {
			r.bad = true
		} else {
			e.ColBERT, e.ColBERTDim = r.floats(rows*dim), dim
		}
	} else if dim > 0 {
		e.ColBERTDim = dim
	}
	switch {
	case r.bad || len(r.b) != 0 || flags&^1 != 0:
		return engine.Embedding{}, missCorrupt
	case want.Has(engine.Dense) && len(e.Dense) == 0, !want.Has(engine.Dense) && len(e.Dense) > 0,
		!want.Has(engine.Sparse) && len(e.SparseIDs) > 0, !want.Has(engine.ColBERT) && len(e.ColBERT) > 0:
		// The key names the outputs: a value of other outputs under it
		// was not written by a member of this fleet.
		return engine.Embedding{}, missCorrupt
	}
	return e, ""
}

// A text's tokens are at most tokensPerByte a byte of it plus
// maxSpecialTokens: a token covers at least one character of the
// normalized text, and NFKC makes at most 18 characters (33 bytes) of
// one code point of 3 bytes (U+FDFA); the specials are BGE-M3's <s> and
// </s>, BERT's [CLS] and [SEP], with room to spare.
const (
	tokensPerByte    = 16
	maxSpecialTokens = 8
)

// plausible reports whether a decoded value could be this fleet's answer
// for a text of textBytes bytes on a model of maxTokens (0: unknown): the
// checksum proves a value undamaged, not computed, and the bucket is
// trusted for nothing but a hint. Its token count is what the job is
// billed for: within what a text of its size can have, and within the
// model's tokens when it was not truncated. Its vectors are finite, and
// its ColBERT rows are at most its tokens.
func plausible(e *engine.Embedding, textBytes, maxTokens int) bool {
	switch {
	case e.Tokens <= 0 || e.Tokens > tokensPerByte*textBytes+maxSpecialTokens,
		maxTokens > 0 && !e.Truncated && e.Tokens > maxTokens,
		e.ColBERTDim > 0 && len(e.ColBERT)/e.ColBERTDim > e.Tokens:
		return false
	}
	return finite(e.Dense) && finite(e.SparseWeights) && finite(e.ColBERT)
}

// valueReader reads a value's fields in order; a read past the end sets
// bad and returns zeros.
type valueReader struct {
	b   []byte
	bad bool
}

func (r *valueReader) fits(n int) bool {
	if n < 0 || n > len(r.b) {
		r.bad = true
		return false
	}
	return true
}

func (r *valueReader) byte() byte {
	if !r.fits(1) {
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *valueReader) u32() uint32 {
	if !r.fits(4) {
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

func (r *valueReader) floats(n int) []float32 {
	if n == 0 || !r.fits(4*n) {
		return nil
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(r.b[4*i:]))
	}
	r.b = r.b[4*n:]
	return out
}
