package jetstream

import (
	"context"
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/jetembed/jetembed/schema"
)

// The rerank and tokenize endpoints of the embed service
// ([schema.SubjectRerank], [schema.SubjectTokenize]).
const (
	RerankEndpointName = "rerank"
	TokenizeName       = "tokenize"
	// DefaultRerankBytes bounds the text (query included) of one rerank
	// request: its ColBERT vectors, about 4 KiB a token with BGE-M3, are
	// held while it is scored. Larger is refused job_too_large.
	DefaultRerankBytes = 128 << 10
)

// Tokenizer is the model's tokenizer for the tokenize endpoint: the ids of
// text (with the special tokens when special), their vocabulary strings,
// which of them are special, and the count before the model's cut.
type Tokenizer func(text string, special bool) (ids []uint32, tokens []string, specials []bool, count int)

// rerank handles a request of embed.v1.rerank: the query and the texts
// go to the consumer as one interactive job asking for every output (so
// they are packed with all other work and admitted like any request), and
// the answer is made from the whole result in this process: scores, not
// vectors. A request that is no rerank request goes to the consumer too,
// refused: it is dead-lettered and answered there, as a bad job is.
func (s *service) rerank(ctx context.Context, it queued, limits schema.Limits, maxBytes int) {
	req := it.req
	enc := schema.EncodingFor(req.Headers().Get(schema.HeaderContentType))
	d := requestDelivery(s.nc, req, it.tenant, it.received)
	rr, se := decodeRerank(limits, req.Data(), enc, maxBytes)
	var weights schema.RerankWeights
	if se == nil {
		var job *schema.Job
		job, weights = rerankJob(rr)
		data, err := schema.EncodeJob(job, enc)
		if err != nil {
			se = schema.Errorf(schema.CodeBadPayload, "the request does not encode as a job: %v", err)
		} else {
			d.Data = data
		}
	}
	if se != nil {
		id := ""
		if rr != nil {
			id = rr.ID
		}
		d.Refusal = se
		d.Answer = func(res *schema.Result) (map[string][]string, []byte) {
			out := &schema.RerankResult{V: schema.Version, ID: id, Model: res.Model, Error: res.Error}
			body, _ := schema.EncodeRerankResult(out, enc)
			return plainHeader(enc, id, out.Error), body
		}
	} else {
		d.Answer = func(res *schema.Result) (map[string][]string, []byte) {
			out := rerankResult(res, len(rr.Texts), weights)
			body, err := schema.EncodeRerankResult(out, enc)
			if err != nil {
				out = &schema.RerankResult{V: schema.Version, ID: res.ID, Model: res.Model, Error: schema.Errorf(schema.CodeInternal, "the scores do not encode")}
				body, _ = schema.EncodeRerankResult(out, enc)
			}
			return plainHeader(enc, out.ID, out.Error), body
		}
	}
	if err := s.sink.Submit(ctx, d); err != nil {
		s.log.Debug("rerank request refused", "subject", req.Subject(), "err", err)
	}
}

// decodeRerank decodes and checks a rerank request, its text within
// maxBytes.
func decodeRerank(limits schema.Limits, data []byte, enc schema.Encoding, maxBytes int) (*schema.RerankRequest, *schema.Error) {
	rr, se := limits.DecodeRerankRequest(data, enc)
	if se != nil {
		return rr, se
	}
	return rr, rerankBytes(rr, maxBytes)
}

// checkRerank checks a rerank request made inside the process as
// decodeRerank checks a decoded one.
func checkRerank(limits schema.Limits, rr *schema.RerankRequest, maxBytes int) *schema.Error {
	if se := limits.CheckRerankRequest(rr); se != nil {
		return se
	}
	return rerankBytes(rr, maxBytes)
}

// rerankBytes refuses a rerank request whose text is over maxBytes.
func rerankBytes(rr *schema.RerankRequest, maxBytes int) *schema.Error {
	n := len(rr.Query)
	for _, t := range rr.Texts {
		n += len(t)
	}
	if n > maxBytes {
		return schema.Errorf(schema.CodeJobTooLarge, "the query and texts are %d bytes, over the rerank limit of %d: send fewer texts a request", n, maxBytes)
	}
	return nil
}

// rerankJob is the interactive job of a rerank: the query first, then the
// texts, asking for every output.
func rerankJob(rr *schema.RerankRequest) (*schema.Job, schema.RerankWeights) {
	weights := schema.DefaultRerankWeights
	if rr.Weights != nil {
		weights = *rr.Weights
	}
	return &schema.Job{V: schema.Version, ID: rr.ID, Texts: append([]string{rr.Query}, rr.Texts...),
		Outputs: []schema.Output{schema.OutputDense, schema.OutputSparse, schema.OutputColBERT}, Truncate: rr.Truncate, Deadline: rr.Deadline}, weights
}

// rerankResult scores the result of a rerank job: item 0 is the query.
func rerankResult(res *schema.Result, texts int, w schema.RerankWeights) *schema.RerankResult {
	out := &schema.RerankResult{V: schema.Version, ID: res.ID, Model: res.Model, Usage: res.Usage, Error: res.Error}
	if res.Error != nil {
		return out
	}
	if len(res.Items) != texts+1 {
		out.Error = schema.Errorf(schema.CodeInternal, "%d items for the query and %d texts", len(res.Items), texts)
		return out
	}
	q := &res.Items[0]
	if q.Error != nil {
		out.Error = &schema.Error{Code: q.Error.Code, Message: "the query: " + q.Error.Message, Retriable: q.Error.Retriable}
		return out
	}
	out.Scores = make([]schema.RerankScore, texts)
	for i := range texts {
		it := &res.Items[i+1]
		if it.Error != nil {
			out.Scores[i] = schema.RerankScore{Index: i, Error: it.Error}
			continue
		}
		s := schema.HybridScore(q, it, w)
		if !finite(s.Score, s.Dense, s.Sparse, s.ColBERT) {
			// Never a score JSON cannot carry (nor a caller sort).
			out.Scores[i] = schema.RerankScore{Index: i, Error: schema.Errorf(schema.CodeInternal, "the score of text %d is not a finite number", i)}
			continue
		}
		s.Index, s.Tokens = i, it.Tokens
		out.Scores[i] = s
	}
	return out
}

func finite(vs ...float64) bool {
	for _, v := range vs {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return false
		}
	}
	return true
}

// tokenize answers a request of embed.v1.tokenize with tok, in this
// process (its reply passed the door's check). An answer that would be
// over the server's max payload is answered result_too_large instead.
func (s *service) tokenize(it queued, tok Tokenizer, model string, limits schema.Limits) {
	enc := schema.EncodingFor(it.req.Headers().Get(schema.HeaderContentType))
	out := tokenizeWithin(tok, model, limits, it.req.Data(), enc, answerRoom(s.nc))
	s.respondPlain(it.req, enc, out, out.Error)
}

// tokenize decodes a tokenize request and answers it with tok.
func tokenize(tok Tokenizer, model string, limits schema.Limits, data []byte, enc schema.Encoding) *schema.TokenizeResult {
	return tokenizeWithin(tok, model, limits, data, enc, 0)
}

// answerRoom is the largest answer body nc can send: the server's max
// payload less room for the headers; 0 when it is not known.
func answerRoom(nc *nats.Conn) int {
	if nc == nil || nc.MaxPayload() <= 0 {
		return 0
	}
	return max(int(nc.MaxPayload())-answerHeaderRoom, 1)
}

// answerHeaderRoom is what the headers of an answer may take (micro's
// error headers, the content type, the job id).
const answerHeaderRoom = 2048

// tokenizeWithin is tokenize with answers bounded by room bytes (0: none):
// the answer's size is estimated while the texts are tokenized, and
// measured once encoded, and an answer over room is result_too_large (the
// caller splits the request) rather than a message the server refuses.
func tokenizeWithin(tok Tokenizer, model string, limits schema.Limits, data []byte, enc schema.Encoding, room int) *schema.TokenizeResult {
	out := tokenizeItems(tok, model, limits, data, enc, room)
	if room <= 0 || out.Error != nil {
		return out
	}
	body, err := schema.EncodeTokenizeResult(out, enc)
	if err == nil && len(body) > room {
		return tooLargeAnswer(out, len(body), room, len(out.Items))
	}
	return out
}

// tooLargeAnswer is the result_too_large answer of a tokenize request
// whose answer would be n bytes (about, when done texts of all were).
func tooLargeAnswer(out *schema.TokenizeResult, n, room, done int) *schema.TokenizeResult {
	about := ""
	if done < len(out.Items) {
		about = fmt.Sprintf("more than %d bytes after %d of %d texts", n, done, len(out.Items))
	} else {
		about = fmt.Sprintf("%d bytes", n)
	}
	return &schema.TokenizeResult{V: schema.Version, ID: out.ID, Model: out.Model,
		Error: schema.Errorf(schema.CodeResultTooLarge, "the answer would be %s, over the largest message of %d bytes: send fewer or shorter texts a request", about, room)}
}

func tokenizeItems(tok Tokenizer, model string, limits schema.Limits, data []byte, enc schema.Encoding, room int) *schema.TokenizeResult {
	tr, se := limits.DecodeTokenizeRequest(data, enc)
	out := &schema.TokenizeResult{V: schema.Version, Model: model}
	if tr != nil {
		out.ID = tr.ID
	}
	if se != nil {
		out.Error = se
		return out
	}
	special := tr.AddSpecial == nil || *tr.AddSpecial
	out.Items = make([]schema.TokenizeItem, len(tr.Texts))
	est := 128
	for i, t := range tr.Texts {
		if !utf8.ValidString(t) {
			out.Items[i] = schema.TokenizeItem{IDs: []uint32{}, Tokens: []string{}, Special: []bool{},
				Error: schema.Errorf(schema.CodeInvalidUTF8, "text %d is not valid UTF-8", i)}
			continue
		}
		ids, toks, sp, count := tok(t, special)
		out.Items[i] = schema.TokenizeItem{IDs: ids, Tokens: toks, Special: sp, Count: count}
		if room > 0 {
			est += itemSize(enc, &out.Items[i])
			if est > room {
				return tooLargeAnswer(out, est, room, i+1)
			}
		}
	}
	return out
}

// itemSize is about how many bytes item takes in an answer encoded with
// enc: each token's id, string and flag, and the item's field names.
func itemSize(enc schema.Encoding, item *schema.TokenizeItem) int {
	n := 64
	for i, id := range item.IDs {
		switch {
		case enc == schema.EncodingJSON:
			n += digits(id) + 1 + 6 // the id, the flag ("false,")
		case id < 128:
			n += 1 + 1
		default:
			n += 5 + 1
		}
		if i < len(item.Tokens) {
			n += tokenSize(enc, item.Tokens[i])
		}
	}
	return n
}

// tokenSize is the bytes of one token string in enc: JSON escapes quotes,
// backslashes, control and HTML characters.
func tokenSize(enc schema.Encoding, tok string) int {
	if enc != schema.EncodingJSON {
		return len(tok) + 5
	}
	n := 3 // the quotes and the comma
	for i := 0; i < len(tok); i++ {
		switch b := tok[i]; {
		case b < 0x20 || b == '<' || b == '>' || b == '&':
			n += 6
		case b == '"' || b == '\\':
			n += 2
		default:
			n++
		}
	}
	return n
}

func digits(v uint32) int {
	n := 1
	for v >= 10 {
		v /= 10
		n++
	}
	return n
}

// respondPlain answers a tokenize request with v, as a micro error when
// se is set. An answer that cannot be sent is counted and logged: never
// lost silently.
func (s *service) respondPlain(req micro.Request, enc schema.Encoding, v any, se *schema.Error) {
	var body []byte
	var err error
	var id string
	switch x := v.(type) {
	case *schema.RerankResult:
		body, err = schema.EncodeRerankResult(x, enc)
		id = x.ID
	case *schema.TokenizeResult:
		body, err = schema.EncodeTokenizeResult(x, enc)
		id = x.ID
	default:
		err = fmt.Errorf("no encoder for %T", v)
	}
	if err != nil {
		s.log.Warn("answer does not encode", "subject", req.Subject(), "err", err)
		se = schema.Errorf(schema.CodeInternal, "the answer does not encode")
		body = tokenizeErrBody(enc, se)
	}
	opt := micro.WithHeaders(micro.Headers(plainHeader(enc, id, se)))
	if se != nil {
		err = req.Error(string(se.Code), string(se.Code), body, opt)
	} else {
		err = req.Respond(body, opt)
	}
	if err != nil {
		s.answerFailed(req, err)
	}
}

func plainHeader(enc schema.Encoding, id string, se *schema.Error) map[string][]string {
	h := map[string][]string{schema.HeaderContentType: {enc.ContentType()}, schema.HeaderJobID: {id}}
	if se != nil {
		h[schema.HeaderErrorCode] = []string{string(se.Code)}
	}
	return h
}
