package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
)

// Media types of the two encodings.
const (
	MediaTypeMsgpack = "application/msgpack"
	MediaTypeJSON    = "application/json"
)

// Encoding is the body encoding of a job and of its result.
type Encoding uint8

// The encodings; the zero value is msgpack, the default.
const (
	EncodingMsgpack Encoding = iota
	EncodingJSON
)

// EncodingFor returns the encoding a Content-Type header selects: JSON for
// the media type application/json (any case, parameters such as charset
// ignored), msgpack for everything else including the empty string.
func EncodingFor(contentType string) Encoding {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		// A malformed header may still name JSON before a broken parameter.
		mt, _, _ = strings.Cut(contentType, ";")
		mt = strings.ToLower(strings.TrimSpace(mt))
	}
	if mt == MediaTypeJSON {
		return EncodingJSON
	}
	return EncodingMsgpack
}

// ContentType returns the media type to put in the Content-Type header.
func (e Encoding) ContentType() string {
	if e == EncodingJSON {
		return MediaTypeJSON
	}
	return MediaTypeMsgpack
}

// String returns "json" or "msgpack".
func (e Encoding) String() string {
	if e == EncodingJSON {
		return "json"
	}
	return "msgpack"
}

// EncodeJob encodes j. Map keys of Meta are sorted in msgpack, so equal jobs
// encode to equal bytes.
func EncodeJob(j *Job, enc Encoding) ([]byte, error) {
	return encode(j, enc)
}

// EncodeResult encodes r. JSON cannot carry NaN or infinities: a vector
// holding one fails to encode in JSON (msgpack carries every bit pattern).
func EncodeResult(r *Result, enc Encoding) ([]byte, error) {
	return encode(r, enc)
}

func encode(v any, enc Encoding) ([]byte, error) {
	var buf bytes.Buffer
	if r, ok := v.(*Result); ok {
		buf.Grow(r.sizeHint())
	}
	var rawMeta []byte
	if r, ok := v.(*Result); ok && enc == EncodingJSON {
		if rawMeta = r.rawMeta.in(EncodingJSON); rawMeta != nil {
			c := *r
			c.Meta = nil
			v = &c
		}
	}
	if enc == EncodingJSON {
		je := json.NewEncoder(&buf)
		je.SetEscapeHTML(false) // texts and meta echo as sent
		if err := je.Encode(v); err != nil {
			return nil, fmt.Errorf("encode json: %w", err)
		}
		out := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		if rawMeta != nil {
			// A result object always has v and id: meta follows them.
			out = append(append(append(out[:len(out)-1], `,"meta":`...), rawMeta...), '}')
		}
		return out, nil
	}
	e := msgpack.GetEncoder()
	defer msgpack.PutEncoder(e)
	e.Reset(&buf)
	e.SetSortMapKeys(true)
	if err := e.Encode(v); err != nil {
		return nil, fmt.Errorf("encode msgpack: %w", err)
	}
	return buf.Bytes(), nil
}
