package schema

import (
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// DecodeResult decodes a result body, as a client does with what arrives on
// its reply subject. Failures are *Error with [CodeBadPayload]. Unknown
// fields are ignored.
func DecodeResult(data []byte, enc Encoding) (*Result, error) {
	res := new(Result)
	var err error
	if enc == EncodingJSON {
		err = decodeJSON(data, res)
	} else {
		err = decodeMsgpack(data, res)
	}
	if err != nil {
		return nil, Errorf(CodeBadPayload, "decode %s result: %v", enc, err)
	}
	// An empty dense or ColBERT is not encoded (omitempty, in either
	// encoding): it decodes as none, so that a round trip keeps the
	// result as it is.
	for i := range res.Items {
		if it := &res.Items[i]; len(it.Dense) == 0 {
			it.Dense = nil
		}
		if it := &res.Items[i]; len(it.ColBERT) == 0 {
			it.ColBERT = nil
		}
	}
	return res, nil
}

// DecodeMsgpack decodes a result map with the same bounds as
// [Job.DecodeMsgpack].
func (res *Result) DecodeMsgpack(dec *msgpack.Decoder) error {
	r := reader{dec}
	return r.fields("result", func(key string) error {
		var err error
		switch key {
		case "v":
			var v int64
			v, err = r.integer()
			res.V = clampInt(v)
		case "id":
			res.ID, err = r.str()
		case "model":
			res.Model, err = r.str()
		case "items":
			res.Items, err = r.items()
		case "usage":
			err = r.usage(&res.Usage)
		case "error":
			res.Error, err = r.errorValue()
		case "meta":
			res.Meta, err = r.meta()
		case "blob":
			res.Blob = new(Blob)
			err = r.blob(res.Blob)
		default:
			err = r.skip()
		}
		return err
	})
}

// fields reads a map with string keys, calling field for each key whose
// value is not nil (nil means absent).
func (r reader) fields(what string, field func(key string) error) error {
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("%s is nil", what)
	}
	var seen keySet
	for range n {
		key, err := r.str()
		if err != nil {
			return fmt.Errorf("%s field name: %w", what, err)
		}
		if seen.add(key) {
			return fmt.Errorf("%s field %s given twice", what, quoteShort(key))
		}
		isNil, err := r.isNil()
		if err == nil && !isNil {
			err = field(key)
		}
		if err != nil {
			return fmt.Errorf("%s field %q: %w", what, key, err)
		}
	}
	return nil
}

func (r reader) items() ([]Item, error) {
	// An item is at least an empty fixmap: one byte.
	n, err := r.arrayLen(1)
	if err != nil || n < 0 {
		return nil, err
	}
	out := make([]Item, 0, min(n, r.left()))
	for i := range n {
		var it Item
		if err := r.item(&it); err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
		out = append(out, it)
	}
	return out, nil
}

func (r reader) item(it *Item) error {
	return r.fields("item", func(key string) error {
		var err error
		switch key {
		case "dense":
			err = it.Dense.DecodeMsgpack(r.dec)
		case "sparse":
			it.Sparse = new(Sparse)
			err = r.sparse(it.Sparse)
		case "colbert":
			it.ColBERT, err = r.vectors()
		case "tokens":
			var v int64
			v, err = r.integer()
			it.Tokens = clampInt(v)
		case "truncated":
			it.Truncated, err = r.boolean()
		case "error":
			it.Error, err = r.errorValue()
		default:
			err = r.skip()
		}
		return err
	})
}

func (r reader) sparse(s *Sparse) error {
	return r.fields("sparse", func(key string) error {
		var err error
		switch key {
		case "ids":
			s.IDs, err = r.uint32s()
		case "weights":
			err = s.Weights.DecodeMsgpack(r.dec)
		default:
			err = r.skip()
		}
		return err
	})
}

// vectors reads ColBERT: an array of bin vectors.
func (r reader) vectors() ([]Vector, error) {
	n, err := r.arrayLen(1)
	if err != nil || n < 0 {
		return nil, err
	}
	out := make([]Vector, n)
	for i := range out {
		if err := out[i].DecodeMsgpack(r.dec); err != nil {
			return nil, fmt.Errorf("token %d: %w", i, err)
		}
	}
	return out, nil
}

func (r reader) uint32s() ([]uint32, error) {
	n, err := r.arrayLen(1)
	if err != nil || n < 0 {
		return nil, err
	}
	out := make([]uint32, 0, min(n, r.left()))
	for range n {
		v, err := r.integer()
		if err != nil {
			return nil, err
		}
		if v < 0 || v > 1<<32-1 {
			return nil, fmt.Errorf("token id %d out of range", v)
		}
		out = append(out, uint32(v))
	}
	return out, nil
}

func (r reader) usage(u *Usage) error {
	return r.fields("usage", func(key string) error {
		var v int64
		var err error
		switch key {
		case "tokens":
			v, err = r.integer()
			u.Tokens = clampInt(v)
		case "padded_tokens":
			v, err = r.integer()
			u.PaddedTokens = clampInt(v)
		case "cached":
			v, err = r.integer()
			u.Cached = clampInt(v)
		case "cached_tokens":
			v, err = r.integer()
			u.CachedTokens = clampInt(v)
		default:
			err = r.skip()
		}
		return err
	})
}

func (r reader) errorValue() (*Error, error) {
	e := new(Error)
	err := r.fields("error", func(key string) error {
		var err error
		switch key {
		case "code":
			var s string
			s, err = r.str()
			e.Code = Code(s)
		case "message":
			e.Message, err = r.str()
		case "retriable":
			e.Retriable, err = r.boolean()
		case "retry_after_ms":
			var v int64
			v, err = r.integer()
			e.RetryAfterMS = max(v, 0)
		default:
			err = r.skip()
		}
		return err
	})
	if err == nil && e.Code == "" {
		err = errors.New("error without a code")
	}
	return e, err
}

func (r reader) blob(b *Blob) error {
	return r.fields("blob", func(key string) error {
		var err error
		switch key {
		case "name":
			b.Name, err = r.str()
		case "size":
			b.Size, err = r.integer()
		case "digest":
			b.Digest, err = r.str()
		case "key":
			b.Key, err = r.bytes()
		default:
			err = r.skip()
		}
		return err
	})
}
