package jetstream

import (
	"context"
	"fmt"
	"log/slog"
	"time"
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

// rerankHandler answers embed.v1.rerank: the query and the texts go to the
// consumer as one interactive job asking for every output (so they are
// packed with all other work and admitted like any request), and the
// answer is made from the whole result in this process: scores, not
// vectors.
func rerankHandler(ctx context.Context, nc *nats.Conn, sink Sink, log *slog.Logger, limits schema.Limits, maxBytes int, tenant func(string) string) micro.Handler {
	return micro.ContextHandler(ctx, func(ctx context.Context, req micro.Request) {
		enc := schema.EncodingFor(req.Headers().Get(schema.HeaderContentType))
		rr, se := decodeRerank(limits, req.Data(), enc, maxBytes)
		if se != nil {
			id := ""
			if rr != nil {
				id = rr.ID
			}
			respondPlain(req, enc, &schema.RerankResult{V: schema.Version, ID: id, Error: se}, se, log)
			return
		}
		job, weights := rerankJob(rr)
		data, err := schema.EncodeJob(job, enc)
		if err != nil {
			se := schema.Errorf(schema.CodeBadPayload, "the request does not encode as a job: %v", err)
			respondPlain(req, enc, &schema.RerankResult{V: schema.Version, ID: rr.ID, Error: se}, se, log)
			return
		}
		d := requestDelivery(nc, req, tenant(req.Subject()), time.Now())
		d.Data = data
		d.Answer = func(res *schema.Result) (map[string][]string, []byte) {
			out := rerankResult(res, len(rr.Texts), weights)
			body, err := schema.EncodeRerankResult(out, enc)
			if err != nil {
				out = &schema.RerankResult{V: schema.Version, ID: res.ID, Model: res.Model, Error: schema.Errorf(schema.CodeInternal, "the scores do not encode")}
				body, _ = schema.EncodeRerankResult(out, enc)
			}
			return plainHeader(enc, out.ID, out.Error), body
		}
		if err := sink.Submit(ctx, d); err != nil {
			log.Debug("rerank request refused", "subject", req.Subject(), "err", err)
		}
	})
}

// decodeRerank decodes and checks a rerank request, its text within
// maxBytes.
func decodeRerank(limits schema.Limits, data []byte, enc schema.Encoding, maxBytes int) (*schema.RerankRequest, *schema.Error) {
	rr, se := limits.DecodeRerankRequest(data, enc)
	if se != nil {
		return rr, se
	}
	n := len(rr.Query)
	for _, t := range rr.Texts {
		n += len(t)
	}
	if n > maxBytes {
		return rr, schema.Errorf(schema.CodeJobTooLarge, "the query and texts are %d bytes, over the rerank limit of %d: send fewer texts a request", n, maxBytes)
	}
	return rr, nil
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
		s.Index, s.Tokens = i, it.Tokens
		out.Scores[i] = s
	}
	return out
}

// tokenizeHandler answers embed.v1.tokenize with tok, in this process; a
// request whose inbox is outside its tenant's space gets no answer, as an
// embed request would not.
func tokenizeHandler(tok Tokenizer, model string, log *slog.Logger, limits schema.Limits, replies schema.ReplyPolicy, tenant func(string) string) micro.Handler {
	replies = replies.WithDefaults()
	return micro.HandlerFunc(func(req micro.Request) {
		if tn := tenant(req.Subject()); tn != "" && !schema.ValidTenant(tn) || replies.Check(tenant(req.Subject()), req.Reply()) != nil {
			log.Warn("tokenize request refused: its inbox is outside the requester's space", "subject", req.Subject())
			return
		}
		enc := schema.EncodingFor(req.Headers().Get(schema.HeaderContentType))
		out := tokenize(tok, model, limits, req.Data(), enc)
		respondPlain(req, enc, out, out.Error, log)
	})
}

// tokenize decodes a tokenize request and answers it with tok.
func tokenize(tok Tokenizer, model string, limits schema.Limits, data []byte, enc schema.Encoding) *schema.TokenizeResult {
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
	for i, t := range tr.Texts {
		if !utf8.ValidString(t) {
			out.Items[i] = schema.TokenizeItem{IDs: []uint32{}, Tokens: []string{}, Special: []bool{},
				Error: schema.Errorf(schema.CodeInvalidUTF8, "text %d is not valid UTF-8", i)}
			continue
		}
		ids, toks, sp, count := tok(t, special)
		out.Items[i] = schema.TokenizeItem{IDs: ids, Tokens: toks, Special: sp, Count: count}
	}
	return out
}

// respondPlain answers a rerank or tokenize request with v, as a micro
// error when se is set.
func respondPlain(req micro.Request, enc schema.Encoding, v any, se *schema.Error, log *slog.Logger) {
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
		log.Warn("answer does not encode", "subject", req.Subject(), "err", err)
		_ = req.Error(string(schema.CodeInternal), "the answer does not encode", nil)
		return
	}
	opt := micro.WithHeaders(micro.Headers(plainHeader(enc, id, se)))
	if se != nil {
		err = req.Error(string(se.Code), string(se.Code), body, opt)
	} else {
		err = req.Respond(body, opt)
	}
	if err != nil {
		log.Debug("answer not sent", "subject", req.Subject(), "err", err)
	}
}

func plainHeader(enc schema.Encoding, id string, se *schema.Error) map[string][]string {
	h := map[string][]string{schema.HeaderContentType: {enc.ContentType()}, schema.HeaderJobID: {id}}
	if se != nil {
		h[schema.HeaderErrorCode] = []string{string(se.Code)}
	}
	return h
}
