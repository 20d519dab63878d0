package schema

import (
	"github.com/vmihailenco/msgpack/v5"
)

// EncodeMsgpack writes a result by hand: reflection would box every
// ColBERT row into an interface (one allocation per vector) and walk struct
// tags per item. Empty fields are omitted, as their tags say for JSON.
func (res *Result) EncodeMsgpack(enc *msgpack.Encoder) error {
	raw := res.rawMeta.in(EncodingMsgpack)
	n := 2 + count(res.Model != "") + count(len(res.Items) > 0) + count(!res.Usage.IsZero()) +
		count(res.Error != nil) + count(len(res.Meta) > 0 || raw != nil) +
		count(res.Blob != nil)
	if err := enc.EncodeMapLen(n); err != nil {
		return err
	}
	w := mpWriter{enc: enc}
	w.int("v", res.V)
	w.str("id", res.ID)
	if res.Model != "" {
		w.str("model", res.Model)
	}
	if len(res.Items) > 0 {
		w.key("items")
		w.do(enc.EncodeArrayLen(len(res.Items)))
		for i := range res.Items {
			w.item(&res.Items[i])
		}
	}
	if !res.Usage.IsZero() {
		w.key("usage")
		u := res.Usage
		w.do(enc.EncodeMapLen(2 + count(u.Cached != 0) + count(u.CachedTokens != 0)))
		w.int("tokens", u.Tokens)
		w.int("padded_tokens", u.PaddedTokens)
		if u.Cached != 0 {
			w.int("cached", u.Cached)
		}
		if u.CachedTokens != 0 {
			w.int("cached_tokens", u.CachedTokens)
		}
	}
	if res.Error != nil {
		w.key("error")
		w.errorValue(res.Error)
	}
	switch {
	case raw != nil:
		w.key("meta")
		_, err := enc.Writer().Write(raw)
		w.do(err)
	case len(res.Meta) > 0:
		w.key("meta")
		w.do(enc.Encode(res.Meta))
	}
	if b := res.Blob; b != nil {
		w.key("blob")
		w.do(enc.EncodeMapLen(3 + count(len(b.Key) > 0)))
		w.str("name", b.Name)
		w.int("size", int(b.Size))
		w.str("digest", b.Digest)
		if len(b.Key) > 0 {
			w.key("key")
			w.do(enc.EncodeBytes(b.Key))
		}
	}
	return w.err
}

// mpWriter keeps the first error so that a sequence of writes reads as a
// list of fields.
type mpWriter struct {
	enc *msgpack.Encoder
	err error
}

func (w *mpWriter) do(err error) {
	if w.err == nil {
		w.err = err
	}
}

func (w *mpWriter) key(k string) { w.do(w.enc.EncodeString(k)) }

func (w *mpWriter) str(k, v string) {
	w.key(k)
	w.do(w.enc.EncodeString(v))
}

func (w *mpWriter) int(k string, v int) {
	w.key(k)
	w.do(w.enc.EncodeInt(int64(v)))
}

func (w *mpWriter) item(it *Item) {
	n := count(len(it.Dense) > 0) + count(it.Sparse != nil) + count(len(it.ColBERT) > 0) +
		count(it.Tokens != 0) + count(it.Truncated) + count(it.Error != nil)
	w.do(w.enc.EncodeMapLen(n))
	if len(it.Dense) > 0 {
		w.key("dense")
		w.do(it.Dense.EncodeMsgpack(w.enc))
	}
	if it.Sparse != nil {
		w.key("sparse")
		w.do(w.enc.EncodeMapLen(2))
		w.key("ids")
		if it.Sparse.IDs == nil {
			w.do(w.enc.EncodeNil())
		} else {
			w.do(w.enc.EncodeArrayLen(len(it.Sparse.IDs)))
			for _, id := range it.Sparse.IDs {
				w.do(w.enc.EncodeUint(uint64(id)))
			}
		}
		w.key("weights")
		w.do(it.Sparse.Weights.EncodeMsgpack(w.enc))
	}
	if len(it.ColBERT) > 0 {
		w.key("colbert")
		w.do(w.enc.EncodeArrayLen(len(it.ColBERT)))
		for _, v := range it.ColBERT {
			w.do(v.EncodeMsgpack(w.enc))
		}
	}
	if it.Tokens != 0 {
		w.int("tokens", it.Tokens)
	}
	if it.Truncated {
		w.key("truncated")
		w.do(w.enc.EncodeBool(true))
	}
	if it.Error != nil {
		w.key("error")
		w.errorValue(it.Error)
	}
}

func (w *mpWriter) errorValue(e *Error) {
	w.do(w.enc.EncodeMapLen(2 + count(e.Retriable) + count(e.RetryAfterMS > 0)))
	w.str("code", string(e.Code))
	w.str("message", e.Message)
	if e.Retriable {
		w.key("retriable")
		w.do(w.enc.EncodeBool(true))
	}
	if e.RetryAfterMS > 0 {
		w.key("retry_after_ms")
		w.do(w.enc.EncodeInt(e.RetryAfterMS))
	}
}

func count(b bool) int {
	if b {
		return 1
	}
	return 0
}

// sizeHint estimates the msgpack size of a result so the output buffer is
// allocated once rather than doubled a dozen times for a large ColBERT
// result.
func (res *Result) sizeHint() int {
	n := 128 + len(res.ID) + len(res.Model) + len(res.rawMeta.data)
	for i := range res.Items {
		it := &res.Items[i]
		n += 64 + 4*len(it.Dense)
		if it.Sparse != nil {
			n += 5*len(it.Sparse.IDs) + 4*len(it.Sparse.Weights)
		}
		for _, v := range it.ColBERT {
			n += 5 + 4*len(v)
		}
		if it.Error != nil {
			n += 32 + len(it.Error.Message)
		}
	}
	return n
}
