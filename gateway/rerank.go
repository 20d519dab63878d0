package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"sync"

	"github.com/jetembed/jetembed/schema"
)

// Reranker is what a [Requester] may also do: ask the fleet's rerank
// endpoint (embed.v1.rerank), which scores texts against a query with
// BGE-M3's hybrid of dense, sparse and ColBERT. Without it the rerank
// routes answer 501.
type Reranker interface {
	Rerank(ctx context.Context, req *schema.RerankRequest) (*schema.RerankResult, error)
}

// DefaultRerankPartBytes bounds the text of one rerank request the
// gateway sends (the member holds the ColBERT vectors of all of it while
// it scores): a call with more is split into requests that each carry
// the query.
const DefaultRerankPartBytes = 64 << 10

// decodeWeights decodes the per-call weights, whose names match exactly.
func decodeWeights(raw json.RawMessage) (*schema.RerankWeights, *apiError) {
	if len(raw) == 0 {
		return nil, nil
	}
	w := new(schema.RerankWeights)
	if err := decodeFields(raw, fields{"dense": &w.Dense, "sparse": &w.Sparse, "colbert": &w.ColBERT}); err != nil {
		return nil, badParam("weights", codeInvalidWeights, "weights must be an object of dense, sparse and colbert numbers: %v", err)
	}
	return w, nil
}

// rerankCall is a rerank as both routes ask for it.
type rerankCall struct {
	query    string
	texts    []string
	weights  *schema.RerankWeights
	truncate *bool
}

// check refuses what the fleet would: an empty query or text list, texts
// too long, weights out of range.
func (s *Server) checkRerank(c *rerankCall, textsName string) *apiError {
	switch {
	case c.query == "":
		return badParam("query", codeInvalidInput, "query is required: a non-empty string")
	case len(c.query) > s.cfg.MaxTextBytes:
		e := newError(http.StatusRequestEntityTooLarge, string(schema.CodeJobTooLarge), "query is %d bytes, over the limit of %d", len(c.query), s.cfg.MaxTextBytes)
		e.Param = "query"
		return e
	case len(c.query) > DefaultRerankPartBytes/2:
		e := newError(http.StatusRequestEntityTooLarge, string(schema.CodeJobTooLarge), "query is %d bytes, over the rerank limit of %d", len(c.query), DefaultRerankPartBytes/2)
		e.Param = "query"
		return e
	}
	if c.weights != nil {
		if err := c.weights.Check(); err != nil {
			return badParam("weights", codeInvalidWeights, "%v", err)
		}
	}
	for i, t := range c.texts {
		if len(t) > s.cfg.MaxTextBytes {
			e := newError(http.StatusRequestEntityTooLarge, string(schema.CodeJobTooLarge), "%s[%d] is %d bytes, over the limit of %d", textsName, i, len(t), s.cfg.MaxTextBytes)
			e.Param = textsName
			return e
		}
	}
	return nil
}

// rerank scores every text against the query through the fleet, in parts
// each carrying the query, admitted like an embeddings call; scores come
// back in the texts' order.
func (s *Server) rerank(ctx context.Context, rk Reranker, c *rerankCall) ([]schema.RerankScore, string, int, error) {
	s.refreshCapacity(ctx)
	qTokens := schema.EstimateTokens(c.query)
	partBytes := max(min(s.cfg.JobBytes, DefaultRerankPartBytes)-len(c.query), 1)
	parts := split(c.texts, max(s.cfg.JobTexts-1, 1), partBytes, max(s.capacity.partTokens()-qTokens, 1))
	for i := range parts {
		parts[i].tokens += qTokens
	}
	scores := make([]schema.RerankScore, len(c.texts))
	var (
		mu     sync.Mutex
		model  string
		tokens int
	)
	err := s.send(ctx, parts, func(ctx context.Context, p part, id string) error {
		req := &schema.RerankRequest{V: schema.Version, ID: id, Query: c.query, Texts: c.texts[p.from:p.to],
			Weights: c.weights, Truncate: c.truncate, Deadline: jobDeadline(ctx)}
		res, err := s.rerankRetrying(ctx, rk, req)
		if err != nil {
			return err
		}
		if len(res.Scores) != p.to-p.from {
			return schema.Errorf(schema.CodeInternal, "the fleet answered %d scores for %d texts", len(res.Scores), p.to-p.from)
		}
		mu.Lock()
		defer mu.Unlock()
		for i, sc := range res.Scores {
			sc.Index = p.from + i
			scores[p.from+i] = sc
		}
		tokens += res.Usage.Tokens
		if model == "" {
			model = res.Model
		}
		return nil
	})
	if err != nil {
		return nil, "", 0, err
	}
	if model != "" {
		s.health.sawModel(model)
	}
	return scores, model, tokens, nil
}

func (s *Server) rerankRetrying(ctx context.Context, rk Reranker, req *schema.RerankRequest) (*schema.RerankResult, error) {
	var res *schema.RerankResult
	_, err := s.retrying(ctx, func() (*schema.Result, error) {
		var err error
		res, err = rk.Rerank(ctx, req)
		s.observe(err)
		return nil, err
	})
	if err != nil {
		return nil, s.linkCause(ctx, err)
	}
	return res, nil
}

// runRerank is rerank for one HTTP call, answering a failure (ok false).
func (s *Server) runRerank(w http.ResponseWriter, r *http.Request, c *rerankCall, textsName string) ([]schema.RerankScore, string, int, bool) {
	rk, ok := s.cfg.Requester.(Reranker)
	if !ok {
		writeError(w, newError(http.StatusNotImplemented, codeNoReranker, "this gateway's fleet connection does not rerank"), 0)
		return nil, "", 0, false
	}
	s.metrics.inputs(len(c.texts))
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	ctx, unlink, aerr := s.linked(ctx)
	defer unlink()
	if aerr != nil {
		writeError(w, aerr, s.retryAfter())
		return nil, "", 0, false
	}
	scores, model, tokens, err := s.rerank(ctx, rk, c)
	if err != nil {
		s.fail(ctx, w, r, len(c.texts), err)
		return nil, "", 0, false
	}
	for i, sc := range scores {
		if sc.Error != nil {
			e := itemError(i, sc.Error)
			e.Message = textsName + e.Message[len("input"):]
			e.Param = textsName
			writeError(w, e, s.retryAfter())
			return nil, "", 0, false
		}
	}
	return scores, model, tokens, true
}

// best returns the indexes of scores, best first (ties in input order).
func best(scores []schema.RerankScore) []int {
	order := make([]int, len(scores))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case scores[a].Score > scores[b].Score:
			return -1
		case scores[a].Score < scores[b].Score:
			return 1
		}
		return 0
	})
	return order
}

// rerankTEI is TEI's POST /rerank: {query, texts, raw_scores,
// return_text, truncate, truncation_direction} answered [{index, score,
// text}] best first; weights {dense, sparse, colbert} is this gateway's
// own. raw_scores changes nothing: the hybrid score is no logit to
// squash.
func (s *Server) rerankTEI() http.HandlerFunc {
	return s.post(func(w http.ResponseWriter, r *http.Request, body []byte) {
		var (
			c         rerankCall
			rawTexts  json.RawMessage
			rawScores bool
			retText   bool
			direction string
			rawW      json.RawMessage
		)
		aerr := decodeObject(body, fields{"query": &c.query, "texts": &rawTexts, "raw_scores": &rawScores,
			"return_text": &retText, "truncate": &c.truncate, "truncation_direction": &direction, "weights": &rawW})
		if aerr == nil {
			c.weights, aerr = decodeWeights(rawW)
		}
		if aerr == nil && direction != "" && direction != "right" && direction != "Right" {
			aerr = badParam("truncation_direction", codeUnsupportedOption, "truncation_direction %s is not supported: texts are cut on the right", short(direction))
		}
		if aerr == nil {
			c.texts, aerr = parseInputs(rawTexts, "texts", s.cfg.MaxInputs)
		}
		if aerr == nil {
			aerr = s.checkRerank(&c, "texts")
		}
		if aerr != nil {
			writeError(w, aerr, s.retryAfter())
			return
		}
		scores, _, _, ok := s.runRerank(w, r, &c, "texts")
		if !ok {
			return
		}
		type rank struct {
			Index int     `json:"index"`
			Score float64 `json:"score"`
			Text  *string `json:"text,omitempty"`
		}
		out := make([]rank, 0, len(scores))
		for _, i := range best(scores) {
			rk := rank{Index: i, Score: scores[i].Score}
			if retText {
				rk.Text = &c.texts[i]
			}
			out = append(out, rk)
		}
		writeJSON(w, http.StatusOK, out)
	})
}

// rerankV1 is the Cohere and Jina POST /v1/rerank: {model, query,
// documents (strings or {text}), top_n, return_documents} answered
// {model, results: [{index, relevance_score, document}], usage} best
// first, with this gateway's weights too.
func (s *Server) rerankV1() http.HandlerFunc {
	return s.post(func(w http.ResponseWriter, r *http.Request, body []byte) {
		var (
			c        rerankCall
			model    string
			docs     []json.RawMessage
			topN     *int
			retDocs  *bool
			rawW     json.RawMessage
			maxChunk *int
		)
		aerr := decodeObject(body, fields{"model": &model, "query": &c.query, "documents": &docs, "top_n": &topN,
			"return_documents": &retDocs, "truncate": &c.truncate, "weights": &rawW, "max_chunks_per_doc": &maxChunk})
		if aerr == nil {
			c.weights, aerr = decodeWeights(rawW)
		}
		if aerr == nil {
			c.texts, aerr = s.documents(docs)
		}
		if aerr == nil && topN != nil && *topN < 1 {
			aerr = badParam("top_n", codeInvalidInput, "top_n must be at least 1")
		}
		if aerr == nil {
			aerr = s.checkRerank(&c, "documents")
		}
		if aerr == nil {
			aerr = s.checkModel(r.Context(), model)
		}
		if aerr != nil {
			writeError(w, aerr, s.retryAfter())
			return
		}
		scores, served, tokens, ok := s.runRerank(w, r, &c, "documents")
		if !ok {
			return
		}
		type doc struct {
			Text string `json:"text"`
		}
		type result struct {
			Index          int     `json:"index"`
			RelevanceScore float64 `json:"relevance_score"`
			Document       *doc    `json:"document,omitempty"`
		}
		order := best(scores)
		if topN != nil && *topN < len(order) {
			order = order[:*topN]
		}
		results := make([]result, 0, len(order))
		for _, i := range order {
			res := result{Index: i, RelevanceScore: scores[i].Score}
			if retDocs == nil || *retDocs {
				res.Document = &doc{Text: c.texts[i]}
			}
			results = append(results, res)
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"object": "list", "model": served, "results": results,
			"usage": map[string]int{"total_tokens": tokens},
		})
	})
}

// documents takes the Cohere/Jina documents: strings, or objects with a
// text field.
func (s *Server) documents(docs []json.RawMessage) ([]string, *apiError) {
	switch {
	case len(docs) == 0:
		return nil, badParam("documents", codeInvalidInput, "documents is required: an array of strings or of {\"text\": ...}")
	case len(docs) > s.cfg.MaxInputs:
		return nil, badParam("documents", codeTooManyInputs, "documents has %d items, over the limit of %d a call", len(docs), s.cfg.MaxInputs)
	}
	texts := make([]string, len(docs))
	for i, raw := range docs {
		raw = bytes.TrimSpace(raw)
		var err error
		switch {
		case len(raw) > 0 && raw[0] == '"':
			err = json.Unmarshal(raw, &texts[i])
		case len(raw) > 0 && raw[0] == '{':
			var text *string
			if err = decodeFields(raw, fields{"text": &text}); err == nil && text == nil {
				err = errNoText
			}
			if text != nil {
				texts[i] = *text
			}
		default:
			err = errNoText
		}
		if err != nil {
			return nil, badParam("documents", codeInvalidInput, "documents[%d] is not a string or an object with a string text", i)
		}
	}
	return texts, nil
}

var errNoText = errors.New("no text")
