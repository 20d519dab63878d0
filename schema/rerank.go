package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"
)

// RerankRequest is the body of a request to the rerank endpoint
// (embed.v1.rerank): score each text against the query with BGE-M3's
// hybrid of its three outputs, FlagEmbedding's compute_score:
//
//	score = w.Dense*dense + w.Sparse*sparse + w.ColBERT*colbert
//
// where dense is the cosine of the dense vectors, sparse the lexical match
// (the sum over the token ids both have of query weight x text weight), and
// colbert the mean over the query's tokens of the best dot product with a
// text's token. Encoded like a job (msgpack, or JSON with Content-Type
// application/json), with the same strict rules.
type RerankRequest struct {
	V  int    `msgpack:"v" json:"v"`
	ID string `msgpack:"id" json:"id"`
	// Query is scored against every text; Texts are 1..max_texts.
	Query string   `msgpack:"query" json:"query"`
	Texts []string `msgpack:"texts" json:"texts"`
	// Weights of the three scores; nil means [DefaultRerankWeights].
	Weights *RerankWeights `msgpack:"weights,omitempty" json:"weights,omitempty"`
	// Truncate as in [Job.Truncate]: default true.
	Truncate *bool `msgpack:"truncate,omitempty" json:"truncate,omitempty"`
	// Deadline as in [Job.Deadline].
	Deadline string `msgpack:"deadline,omitempty" json:"deadline,omitempty"`
}

// RerankWeights weigh the dense, sparse and ColBERT scores of a rerank.
type RerankWeights struct {
	Dense   float64 `msgpack:"dense" json:"dense"`
	Sparse  float64 `msgpack:"sparse" json:"sparse"`
	ColBERT float64 `msgpack:"colbert" json:"colbert"`
}

// DefaultRerankWeights are FlagEmbedding's weights_for_different_modes
// default: 0.4 dense, 0.2 sparse, 0.4 ColBERT.
var DefaultRerankWeights = RerankWeights{Dense: 0.4, Sparse: 0.2, ColBERT: 0.4}

// MaxRerankWeight is the largest rerank weight. A ranking does not change
// when every weight is scaled, so a larger one only brings the scores
// closer to overflowing: each part is within [-1, 1] (dense, ColBERT) or a
// sum of products of sparse weights, and their weighted sum must stay a
// finite number, which JSON can carry.
const MaxRerankWeight = 1000

// Check refuses weights that are negative, over [MaxRerankWeight], not
// finite, or all zero.
func (w RerankWeights) Check() error {
	for _, v := range []float64{w.Dense, w.Sparse, w.ColBERT} {
		if !(v >= 0 && v <= MaxRerankWeight) { // NaN too
			return fmt.Errorf("weights must be numbers from 0 to %d, got dense %g, sparse %g, colbert %g", MaxRerankWeight, w.Dense, w.Sparse, w.ColBERT)
		}
	}
	if w.Dense+w.Sparse+w.ColBERT == 0 {
		return errors.New("weights are all zero")
	}
	return nil
}

// RerankResult is the answer of the rerank endpoint: one score per text,
// in the texts' order (sort by Score for the ranking).
type RerankResult struct {
	V      int           `msgpack:"v" json:"v"`
	ID     string        `msgpack:"id" json:"id"`
	Model  string        `msgpack:"model,omitempty" json:"model,omitempty"`
	Scores []RerankScore `msgpack:"scores" json:"scores"`
	Usage  Usage         `msgpack:"usage" json:"usage"`
	Error  *Error        `msgpack:"error,omitempty" json:"error,omitempty"`
}

// RerankScore is one text's score and its three parts. A text that failed
// alone (text_too_long, invalid_utf8) has Error and no score.
type RerankScore struct {
	Index   int     `msgpack:"index" json:"index"`
	Score   float64 `msgpack:"score" json:"score"`
	Dense   float64 `msgpack:"dense" json:"dense"`
	Sparse  float64 `msgpack:"sparse" json:"sparse"`
	ColBERT float64 `msgpack:"colbert" json:"colbert"`
	Tokens  int     `msgpack:"tokens,omitempty" json:"tokens,omitempty"`
	Error   *Error  `msgpack:"error,omitempty" json:"error,omitempty"`
}

// Err returns the request-level error, or nil.
func (r *RerankResult) Err() error {
	if r.Error == nil {
		return nil
	}
	return r.Error
}

// HybridScore is BGE-M3's hybrid score of text against query, from their
// dense, sparse and ColBERT outputs: FlagEmbedding's dense_score (the dot
// product of the L2-normalized dense vectors), compute_lexical_matching_score
// and colbert_score, weighted by w.
func HybridScore(query, text *Item, w RerankWeights) RerankScore {
	s := RerankScore{
		Dense:   dot(query.Dense, text.Dense),
		Sparse:  LexicalMatch(query.Sparse, text.Sparse),
		ColBERT: MaxSim(query.ColBERT, text.ColBERT),
	}
	s.Score = w.Dense*s.Dense + w.Sparse*s.Sparse + w.ColBERT*s.ColBERT
	return s
}

func dot(a, b []float32) float64 {
	var sum float64
	for i := range min(len(a), len(b)) {
		sum += float64(a[i]) * float64(b[i])
	}
	return sum
}

// LexicalMatch is the sum, over the token ids both sparse vectors hold, of
// the query's weight times the text's (FlagEmbedding's
// compute_lexical_matching_score). IDs are sorted, as results carry them.
func LexicalMatch(q, d *Sparse) float64 {
	if q == nil || d == nil {
		return 0
	}
	var sum float64
	i, j := 0, 0
	for i < len(q.IDs) && j < len(d.IDs) && i < len(q.Weights) && j < len(d.Weights) {
		switch {
		case q.IDs[i] < d.IDs[j]:
			i++
		case q.IDs[i] > d.IDs[j]:
			j++
		default:
			sum += float64(q.Weights[i]) * float64(d.Weights[j])
			i++
			j++
		}
	}
	return sum
}

// MaxSim is FlagEmbedding's colbert_score: for each query token the best
// dot product with any of the text's tokens, averaged over the query's
// tokens.
func MaxSim(q, d []Vector) float64 {
	if len(q) == 0 || len(d) == 0 {
		return 0
	}
	var sum float64
	for _, qv := range q {
		best := math.Inf(-1)
		for _, dv := range d {
			best = max(best, dot(qv, dv))
		}
		sum += best
	}
	return sum / float64(len(q))
}

// EncodeRerankRequest and the other encoders of the rerank and tokenize
// endpoints write the value in enc.
func EncodeRerankRequest(r *RerankRequest, enc Encoding) ([]byte, error) { return encodePlain(r, enc) }

// EncodeRerankResult encodes a rerank answer.
func EncodeRerankResult(r *RerankResult, enc Encoding) ([]byte, error) { return encodePlain(r, enc) }

// DecodeRerankResult decodes a rerank answer (a member's: trusted to be
// well formed, still bounded by the library's checks).
func DecodeRerankResult(data []byte, enc Encoding) (*RerankResult, error) {
	r := new(RerankResult)
	if err := decodePlain(data, enc, r); err != nil {
		return nil, Errorf(CodeBadPayload, "decode %s rerank result: %v", enc, err)
	}
	return r, nil
}

// DecodeRerankRequest decodes and checks a rerank request by the job's
// strict rules: exact field names, no key twice, nil/null means absent,
// unknown fields ignored. A failure is a *Error (bad_payload, missing_id,
// empty_job, too_many_texts, job_too_large); the request is returned as
// far as it decoded, to address the answer.
func (l Limits) DecodeRerankRequest(data []byte, enc Encoding) (*RerankRequest, *Error) {
	l = l.WithDefaults()
	if e := l.CheckPayload(len(data)); e != nil {
		return nil, e
	}
	r := new(RerankRequest)
	set := func(key string, dec func(v any) error) error {
		switch key {
		case "v":
			return dec(&r.V)
		case "id":
			return dec(&r.ID)
		case "query":
			return dec(&r.Query)
		case "texts":
			return dec(&r.Texts)
		case "weights":
			r.Weights = new(RerankWeights)
			return dec(r.Weights)
		case "truncate":
			r.Truncate = new(bool)
			return dec(r.Truncate)
		case "deadline":
			return dec(&r.Deadline)
		}
		return nil
	}
	r.V = Version
	if err := decodeRequest(data, enc, set); err != nil {
		return r, Errorf(CodeBadPayload, "decode %s rerank request: %v", enc, err)
	}
	return r, l.CheckRerankRequest(r)
}

// CheckRerankRequest checks a rerank request as [Limits.DecodeRerankRequest]
// does once it is decoded (a request made inside the process is never
// encoded).
func (l Limits) CheckRerankRequest(r *RerankRequest) *Error {
	l = l.WithDefaults()
	switch {
	case r.V != Version:
		return Errorf(CodeBadVersion, "version %d (want %d)", r.V, Version)
	case r.ID == "":
		return Errorf(CodeMissingID, "id is required")
	case len(r.ID) > l.MaxIDBytes || !utf8.ValidString(r.ID):
		return Errorf(CodeBadPayload, "id is over %d bytes or not UTF-8", l.MaxIDBytes)
	case r.Query == "":
		return Errorf(CodeEmptyJob, "query is required")
	case len(r.Texts) == 0:
		return Errorf(CodeEmptyJob, "texts is required: 1 to %d texts to score", l.MaxTexts)
	case len(r.Texts)+1 > l.MaxTexts:
		return Errorf(CodeTooManyTexts, "%d texts and the query, over the limit of %d", len(r.Texts), l.MaxTexts)
	}
	if r.Weights != nil {
		if err := r.Weights.Check(); err != nil {
			return Errorf(CodeBadPayload, "%v", err)
		}
	}
	return nil
}

// decodeRequest decodes a request map field by field: set is called for
// every key whose value is not nil/null, with a function that decodes the
// value into a pointer to a string, int, bool, []string, float64 or a
// struct of float64 fields named by their json tags.
func decodeRequest(data []byte, enc Encoding, set func(key string, dec func(v any) error) error) error {
	if enc == EncodingJSON {
		if err := checkJSON(data); err != nil {
			return err
		}
		d := json.NewDecoder(bytes.NewReader(data))
		d.UseNumber()
		if err := expectDelim(d, '{', "body is not a JSON object"); err != nil {
			return err
		}
		for d.More() {
			tok, err := d.Token()
			if err != nil {
				return err
			}
			key, _ := tok.(string)
			var raw json.RawMessage
			if err := d.Decode(&raw); err != nil {
				return err
			}
			if string(raw) == "null" {
				continue
			}
			if err := set(key, func(v any) error { return strictJSONValue(raw, v) }); err != nil {
				return fmt.Errorf("field %s: %w", quoteShort(key), err)
			}
		}
		if _, err := d.Token(); err != nil {
			return err
		}
		if _, err := d.Token(); err != io.EOF {
			return errors.New("trailing data after the JSON object")
		}
		return nil
	}
	br := bytes.NewReader(data)
	dec := msgpack.GetDecoder()
	defer msgpack.PutDecoder(dec)
	dec.Reset(br)
	r := reader{dec}
	if err := r.fields("request", func(key string) error {
		called := false
		err := set(key, func(v any) error { called = true; return r.into(v) })
		if err == nil && !called {
			err = r.skip()
		}
		return err
	}); err != nil {
		return err
	}
	if br.Len() != 0 {
		return fmt.Errorf("%d trailing bytes", br.Len())
	}
	return nil
}

// strictJSONValue decodes raw into v, matching the field names of a
// weights object exactly (encoding/json would take "DENSE" for dense).
func strictJSONValue(raw json.RawMessage, v any) error {
	if w, ok := v.(*RerankWeights); ok {
		return decodeRequest(raw, EncodingJSON, func(key string, dec func(any) error) error {
			switch key {
			case "dense":
				return dec(&w.Dense)
			case "sparse":
				return dec(&w.Sparse)
			case "colbert":
				return dec(&w.ColBERT)
			}
			return nil
		})
	}
	return json.Unmarshal(raw, v)
}

// into reads one msgpack value into v (see decodeRequest).
func (r reader) into(v any) error {
	var err error
	switch p := v.(type) {
	case *string:
		*p, err = r.str()
	case *int:
		var n int64
		n, err = r.integer()
		*p = clampInt(n)
	case *bool:
		*p, err = r.boolean()
	case *[]string:
		*p, err = r.strings()
	case *float64:
		*p, err = r.dec.DecodeFloat64()
	case *RerankWeights:
		err = r.fields("weights", func(key string) error {
			switch key {
			case "dense":
				return r.into(&p.Dense)
			case "sparse":
				return r.into(&p.Sparse)
			case "colbert":
				return r.into(&p.ColBERT)
			}
			return r.skip()
		})
	default:
		err = fmt.Errorf("no decoder for %T", v)
	}
	return err
}

// encodePlain encodes a value of the rerank and tokenize endpoints.
func encodePlain(v any, enc Encoding) ([]byte, error) {
	if enc == EncodingJSON {
		var buf bytes.Buffer
		je := json.NewEncoder(&buf)
		je.SetEscapeHTML(false)
		if err := je.Encode(v); err != nil {
			return nil, fmt.Errorf("encode json: %w", err)
		}
		return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
	}
	b, err := msgpack.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode msgpack: %w", err)
	}
	return b, nil
}

func decodePlain(data []byte, enc Encoding, v any) error {
	if enc == EncodingJSON {
		return decodeJSON(data, v)
	}
	return msgpack.Unmarshal(data, v)
}
