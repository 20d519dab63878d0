package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"

	"github.com/jetembed/jetembed/schema"
)

// The routes of Hugging Face text-embeddings-inference (TEI), beside the
// OpenAI ones, with the same admission and errors: a TEI client needs
// only a new base URL. /health is shared.

const kindAll kind = 100 // POST /embed_all: ColBERT rows

// Tokenizer is what a [Requester] may also do: ask the fleet's tokenize
// endpoint (embed.v1.tokenize). Without it POST /tokenize answers 501.
type Tokenizer interface {
	Tokenize(ctx context.Context, req *schema.TokenizeRequest) (*schema.TokenizeResult, error)
}

func (s *Server) teiRoutes(route func(method, path, name string, authed bool, h http.HandlerFunc)) {
	route(http.MethodPost, "/embed", "tei-embed", true, s.teiEmbed(kindDense))
	route(http.MethodPost, "/embed_sparse", "tei-embed-sparse", true, s.teiEmbed(kindSparse))
	route(http.MethodPost, "/embed_all", "tei-embed-all", true, s.teiEmbed(kindAll))
	route(http.MethodGet, "/info", "info", true, s.handleInfo)
	route(http.MethodPost, "/tokenize", "tokenize", true, s.post(s.handleTokenize))
	route(http.MethodPost, "/rerank", "rerank", true, s.rerankTEI())
}

// teiRequest is the body of TEI's /embed, /embed_sparse, /embed_all and
// /tokenize.
type teiRequest struct {
	Inputs              json.RawMessage
	Normalize           *bool
	Truncate            *bool
	TruncationDirection string
	PromptName          string
	AddSpecialTokens    *bool
}

func (req *teiRequest) fields() fields {
	return fields{"inputs": &req.Inputs, "normalize": &req.Normalize, "truncate": &req.Truncate,
		"truncation_direction": &req.TruncationDirection, "prompt_name": &req.PromptName,
		"add_special_tokens": &req.AddSpecialTokens}
}

// decodeTEI checks a TEI body: inputs a string or 1..MaxInputs strings,
// and only what BGE-M3 does: normalized vectors, cut on the right, no
// prompts.
func (s *Server) decodeTEI(body []byte) (*teiRequest, []string, *apiError) {
	var req teiRequest
	if aerr := decodeObject(body, req.fields()); aerr != nil {
		return nil, nil, aerr
	}
	switch {
	case req.Normalize != nil && !*req.Normalize:
		return nil, nil, badParam("normalize", codeUnsupportedOption, "normalize false is not supported: BGE-M3's dense vector is the normalized CLS state; omit normalize")
	case req.TruncationDirection != "" && !strings.EqualFold(req.TruncationDirection, "right"):
		return nil, nil, badParam("truncation_direction", codeUnsupportedOption, "truncation_direction %s is not supported: texts are cut on the right", short(req.TruncationDirection))
	case req.PromptName != "":
		return nil, nil, badParam("prompt_name", codeUnsupportedOption, "prompt_name %s is not supported: BGE-M3 has no prompts", short(req.PromptName))
	}
	texts, aerr := parseInputs(req.Inputs, "inputs", s.cfg.MaxInputs)
	if aerr == nil {
		aerr = checkTexts(texts, &s.cfg)
	}
	if aerr != nil {
		return nil, nil, aerr
	}
	return &req, texts, nil
}

// teiEmbed answers /embed (an array of dense vectors), /embed_sparse (an
// array of [{index, value}] per input) and /embed_all (the ColBERT rows of
// each input).
func (s *Server) teiEmbed(k kind) http.HandlerFunc {
	return s.post(func(w http.ResponseWriter, r *http.Request, body []byte) {
		req, texts, aerr := s.decodeTEI(body)
		if aerr == nil && k == kindAll {
			aerr = s.checkColBERT(texts)
		}
		if aerr != nil {
			writeError(w, aerr, s.retryAfter())
			return
		}
		outputs := []schema.Output{schema.OutputDense}
		switch k {
		case kindSparse:
			outputs = []schema.Output{schema.OutputSparse}
		case kindAll:
			outputs = []schema.Output{schema.OutputColBERT}
		}
		out, ok := s.run(w, r, texts, outputs, req.Truncate)
		if !ok {
			return
		}
		resp := make([]any, len(out.items))
		for i, it := range out.items {
			if it.Error != nil {
				writeError(w, itemError(i, it.Error), s.retryAfter())
				return
			}
			switch k {
			case kindDense:
				if len(it.Dense) > 0 {
					s.health.dim.Store(int64(len(it.Dense)))
				}
				resp[i] = vector(it.Dense, false)
			case kindSparse:
				sv := []sparseValue{}
				if it.Sparse != nil {
					if len(it.Sparse.IDs) != len(it.Sparse.Weights) {
						writeError(w, newError(http.StatusBadGateway, codeFleetError, "input[%d]: the fleet answered a sparse vector of %d indices and %d values",
							i, len(it.Sparse.IDs), len(it.Sparse.Weights)), 0)
						return
					}
					for j, id := range it.Sparse.IDs {
						sv = append(sv, sparseValue{Index: id, Value: it.Sparse.Weights[j]})
					}
				}
				resp[i] = sv
			case kindAll:
				rows := make([]any, len(it.ColBERT))
				for j, v := range it.ColBERT {
					rows[j] = vector(v, false)
				}
				resp[i] = rows
			}
		}
		writeJSON(w, http.StatusOK, resp)
	})
}

type sparseValue struct {
	Index uint32  `json:"index"`
	Value float32 `json:"value"`
}

// handleInfo is TEI's GET /info: the served model and the gateway's
// limits.
func (s *Server) handleInfo(w http.ResponseWriter, r *http.Request) {
	m, aerr := s.model(r.Context())
	if aerr != nil {
		writeError(w, aerr, s.retryAfter())
		return
	}
	s.refreshCapacity(r.Context())
	name, sha, _ := strings.Cut(m, "@")
	info := map[string]any{
		"model_id": name, "model_sha": sha, "model_dtype": "float32",
		"model_type":              map[string]any{"embedding": map[string]any{"pooling": "cls"}},
		"max_concurrent_requests": s.cfg.MaxConcurrent,
		"max_client_batch_size":   s.cfg.MaxInputs,
		"max_batch_requests":      nil,
		"max_batch_tokens":        s.window.capacity(),
		"tokenization_workers":    nil,
		"max_input_length":        nil,
		"router":                  "jetembed",
		"version":                 s.health.memberVersion(),
	}
	if n := s.capacity.maxInput(); n > 0 {
		info["max_input_length"] = n
	}
	writeJSON(w, http.StatusOK, info)
}

// tokenizePart asks the fleet to tokenize texts[p.from:p.to] and stores
// the items in out; an answer too large for one message
// (result_too_large) is asked again in two halves, down to single texts.
func (s *Server) tokenizePart(ctx context.Context, tk Tokenizer, out []schema.TokenizeItem, texts []string, p part, special *bool) error {
	res, err := tk.Tokenize(ctx, &schema.TokenizeRequest{V: schema.Version, ID: "gw-tok", Texts: texts[p.from:p.to], AddSpecial: special})
	s.observe(err)
	if errors.Is(err, &schema.Error{Code: schema.CodeResultTooLarge}) && p.to-p.from > 1 {
		mid := (p.from + p.to) / 2
		if err := s.tokenizePart(ctx, tk, out, texts, part{p.from, mid, 0}, special); err != nil {
			return err
		}
		return s.tokenizePart(ctx, tk, out, texts, part{mid, p.to, 0}, special)
	}
	if err == nil && len(res.Items) != p.to-p.from {
		err = schema.Errorf(schema.CodeInternal, "the fleet answered %d items for %d texts", len(res.Items), p.to-p.from)
	}
	if err != nil {
		return err
	}
	copy(out[p.from:], res.Items)
	return nil
}

// tokenizeParts bounds the texts of one tokenize request to the fleet.
const tokenizeParts = 256

// handleTokenize is TEI's POST /tokenize: for each input its tokens as
// [{id, text, special, start, stop}]. Offsets are not known (null).
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request, body []byte) {
	tk, ok := s.cfg.Requester.(Tokenizer)
	if !ok {
		writeError(w, newError(http.StatusNotImplemented, codeNoTokenizer, "this gateway's fleet connection does not tokenize"), 0)
		return
	}
	req, texts, aerr := s.decodeTEI(body)
	if aerr != nil {
		writeError(w, aerr, s.retryAfter())
		return
	}
	special := req.AddSpecialTokens == nil || *req.AddSpecialTokens
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	ctx, unlink, aerr := s.linked(ctx)
	defer unlink()
	if aerr != nil {
		writeError(w, aerr, s.retryAfter())
		return
	}
	items := make([]schema.TokenizeItem, len(texts))
	// An answer is 2.5 to 10 times its text (every token's id, string and
	// flag): parts of a quarter of a job's bytes, and a part whose answer
	// is still too large for one message is asked again in halves.
	parts := split(texts, min(s.cfg.JobTexts*8, tokenizeParts), max(s.cfg.JobBytes/4, 1), 1<<30)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		sem   = make(chan struct{}, s.cfg.Parallel)
	)
	for _, p := range parts {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := s.tokenizePart(ctx, tk, items, texts, p, &special)
			if err != nil {
				mu.Lock()
				if first == nil {
					first = s.linkCause(ctx, err)
					cancel()
				}
				mu.Unlock()
				return
			}
		})
	}
	wg.Wait()
	if first != nil {
		s.fail(ctx, w, r, len(texts), first)
		return
	}
	type token struct {
		ID      uint32 `json:"id"`
		Text    string `json:"text"`
		Special bool   `json:"special"`
		Start   *int   `json:"start"`
		Stop    *int   `json:"stop"`
	}
	resp := make([][]token, len(items))
	for i, it := range items {
		if it.Error != nil {
			writeError(w, itemError(i, it.Error), s.retryAfter())
			return
		}
		resp[i] = make([]token, len(it.IDs))
		for j, id := range it.IDs {
			t := token{ID: id}
			if j < len(it.Tokens) {
				t.Text = it.Tokens[j]
			}
			if j < len(it.Special) {
				t.Special = it.Special[j]
			}
			resp[i][j] = t
		}
	}
	writeJSON(w, http.StatusOK, resp)
}
