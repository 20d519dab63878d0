package schema

// Result answers one [Job]: one [Item] per text, in the job's order, or a
// job-level Error and no items.
type Result struct {
	V  int    `msgpack:"v" json:"v"`
	ID string `msgpack:"id" json:"id"`
	// Model is the model that computed the vectors, as name@sha256-prefix.
	Model string `msgpack:"model,omitempty" json:"model,omitempty"`
	Items []Item `msgpack:"items,omitempty" json:"items,omitempty"`
	Usage Usage  `msgpack:"usage,omitempty" json:"usage,omitzero"`
	// Error is set when the whole job failed; Items is then empty.
	Error *Error         `msgpack:"error,omitempty" json:"error,omitempty"`
	Meta  map[string]any `msgpack:"meta,omitempty" json:"meta,omitempty"`
	// Blob, when set, says the result was too large for one message: the
	// whole result, in the same encoding, is the named object of the blobs
	// Object Store bucket, and this result carries no items.
	Blob *Blob `msgpack:"blob,omitempty" json:"blob,omitempty"`

	rawMeta rawMeta
}

// Blob names a result stored in the blobs Object Store bucket (EMBED_BLOBS
// by default): the object's name, its size in bytes and its digest as the
// Object Store reports it ("SHA-256=" and the unpadded base64url sha256).
//
// When Key is set the object is the result sealed with it (see
// [SealBlob]): size and digest are the stored object's, and only the
// holder of this reference, that is of the reply, can read the result.
type Blob struct {
	Name   string `msgpack:"name" json:"name"`
	Size   int64  `msgpack:"size" json:"size"`
	Digest string `msgpack:"digest" json:"digest"`
	// Key is the AES-256-GCM key the object is sealed with (32 bytes;
	// msgpack bin, JSON base64).
	Key []byte `msgpack:"key,omitempty" json:"key,omitempty"`
}

// EchoMeta sets the result's meta to the job's. When the job was decoded,
// the result encoded in the job's encoding carries meta's bytes exactly as
// they arrived (key order, number spelling, whitespace inside a JSON
// object); in another encoding, or for a job built in Go, Meta is encoded.
// Setting Meta afterwards does not drop the echoed bytes: call EchoMeta
// again, or build a new Result.
func (r *Result) EchoMeta(j *Job) {
	if j == nil {
		return
	}
	r.Meta, r.rawMeta = j.Meta, j.rawMeta
}

// Item is the result for one text. Only the outputs the job asked for are
// set; an item with Error set has no vectors.
type Item struct {
	Dense  Vector  `msgpack:"dense,omitempty" json:"dense,omitempty"`
	Sparse *Sparse `msgpack:"sparse,omitempty" json:"sparse,omitempty"`
	// ColBERT holds one vector per token (the CLS token excluded), all of
	// the same dimension. In msgpack it is an array of bin vectors.
	ColBERT []Vector `msgpack:"colbert,omitempty" json:"colbert,omitempty"`
	// Tokens counts the text's tokens, special tokens included, before any
	// truncation.
	Tokens    int    `msgpack:"tokens,omitempty" json:"tokens,omitempty"`
	Truncated bool   `msgpack:"truncated,omitempty" json:"truncated,omitempty"`
	Error     *Error `msgpack:"error,omitempty" json:"error,omitempty"`
}

// Sparse is a lexical weight vector: Weights[i] belongs to token id IDs[i],
// and IDs are sorted ascending without duplicates.
type Sparse struct {
	IDs     []uint32 `msgpack:"ids" json:"ids"`
	Weights Vector   `msgpack:"weights" json:"weights"`
}

// Usage counts the work a job cost: real tokens, and tokens run including
// the padding of the chunks its texts were packed into.
//
// Tokens counts the real tokens of every text answered, those that came
// from the fleet's cache (serve --cache kv) too, so that quotas and
// metering see a cached text as the text it is; Cached and CachedTokens
// say how many of the texts, and of the Tokens, came from the cache
// instead of a model run, and PaddedTokens counts only what ran. Both are
// omitted when zero: a reader that does not know them sees the usage it
// always saw.
type Usage struct {
	Tokens       int `msgpack:"tokens" json:"tokens"`
	PaddedTokens int `msgpack:"padded_tokens" json:"padded_tokens"`
	Cached       int `msgpack:"cached,omitempty" json:"cached,omitempty"`
	CachedTokens int `msgpack:"cached_tokens,omitempty" json:"cached_tokens,omitempty"`
}

// IsZero reports whether u counts nothing; a zero Usage is omitted on the
// wire.
func (u Usage) IsZero() bool { return u == Usage{} }

// ErrorResult returns the result that reports a job-level failure.
func ErrorResult(id string, err *Error) *Result {
	return &Result{V: Version, ID: id, Error: err}
}

// Err returns the job-level error as an error, or nil when the job
// succeeded. Item errors are not included: check each [Item.Error].
func (r *Result) Err() error {
	if r.Error == nil {
		return nil
	}
	return r.Error
}
