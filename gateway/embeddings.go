package gateway

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/jetembed/jetembed/schema"
)

// kind is which vectors an endpoint answers with.
type kind int

const (
	kindDense  kind = iota // POST /v1/embeddings
	kindSparse             // POST /v1/sparse-embeddings
	kindBoth               // POST /v1/embeddings:both
)

// endpoint is the handler of one embeddings endpoint: decode and check
// the call, run the fleet jobs, answer the list envelope.
func (s *Server) endpoint(k kind) http.HandlerFunc {
	return s.post(func(w http.ResponseWriter, r *http.Request, body []byte) {
		req, texts, aerr := decodeRequest(body, &s.cfg)
		if aerr == nil {
			aerr = s.checkDimensions(k, req)
		}
		if aerr == nil && k != kindDense && (req.ColBERT || req.ReturnColBERT) {
			aerr = s.checkColBERT(texts)
		}
		if aerr == nil {
			aerr = s.checkModel(r.Context(), req.Model)
		}
		if aerr != nil {
			writeError(w, aerr, s.retryAfter())
			return
		}
		out, ok := s.run(w, r, texts, k.outputs(req), req.Truncate)
		if !ok {
			return
		}
		resp, aerr := s.response(k, req, out)
		if aerr != nil {
			writeError(w, aerr, s.retryAfter())
			return
		}
		writeJSON(w, http.StatusOK, resp)
	})
}

// run embeds texts for one HTTP call, bounded by the call timeout and
// the connection to the fleet; a failure is answered (ok false).
func (s *Server) run(w http.ResponseWriter, r *http.Request, texts []string, outputs []schema.Output, truncate *bool) (*embedded, bool) {
	s.metrics.inputs(len(texts))
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	ctx, unlink, aerr := s.linked(ctx)
	defer unlink()
	if aerr != nil {
		writeError(w, aerr, s.retryAfter())
		return nil, false
	}
	out, err := s.embed(ctx, texts, outputs, truncate)
	if err != nil {
		s.fail(ctx, w, r, len(texts), err)
		return nil, false
	}
	return out, true
}

// fail answers a failed fleet call and logs it.
func (s *Server) fail(ctx context.Context, w http.ResponseWriter, r *http.Request, inputs int, err error) {
	aerr := fleetError(err)
	if aerr.Status == http.StatusTooManyRequests && aerr.retryAfter == 0 {
		// The fleet refused it overloaded: come back when what is in
		// flight here has drained.
		aerr.retryAfter = s.window.retryAfter(s.cfg.RetryAfter)
	}
	level := slog.LevelDebug // refusals the client hears about
	if aerr.Status >= 500 && aerr.Status != http.StatusServiceUnavailable {
		level = slog.LevelWarn
	}
	s.cfg.Logger.Log(ctx, level, "gateway call failed", "path", r.URL.Path, "inputs", inputs, "status", aerr.Status, "code", aerr.Code)
	writeError(w, aerr, s.retryAfter())
}

func (k kind) outputs(req *embedRequest) []schema.Output {
	var o []schema.Output
	switch k {
	case kindDense:
		return nil
	case kindSparse:
		o = []schema.Output{schema.OutputSparse}
	case kindBoth:
		o = []schema.Output{schema.OutputDense, schema.OutputSparse}
	}
	if req.ColBERT || req.ReturnColBERT {
		o = append(o, schema.OutputColBERT)
	}
	return o
}

// checkDimensions refuses a dimensions other than the model's own: BGE-M3
// vectors cannot be shortened. Before the first dense answer the dimension
// is not known, and the check waits for the result.
func (s *Server) checkDimensions(k kind, req *embedRequest) *apiError {
	if req.Dimensions == nil || k == kindSparse {
		return nil
	}
	if d := int(s.health.dim.Load()); d > 0 && *req.Dimensions != d {
		return dimensionsError(*req.Dimensions, d)
	}
	return nil
}

// checkColBERT bounds the text of a call asking for ColBERT vectors, whose
// answer grows by kilobytes a token.
func (s *Server) checkColBERT(texts []string) *apiError {
	n := 0
	for _, t := range texts {
		n += len(t)
	}
	if n > s.cfg.ColBERTBytes {
		e := newError(http.StatusRequestEntityTooLarge, codeColBERTTooLarge,
			"a call asking for colbert vectors may carry %d bytes of text, this one has %d: split it, or leave colbert out", s.cfg.ColBERTBytes, n)
		e.Param = "input"
		return e
	}
	return nil
}

func dimensionsError(asked, has int) *apiError {
	return badParam("dimensions", codeDimensions,
		"dimensions %d is not supported: the model's vectors have %d dimensions and cannot be shortened; omit dimensions or send %d", asked, has, has)
}

// response builds the list envelope; an input that failed alone fails the
// call (the OpenAI shape has no per-item errors).
func (s *Server) response(k kind, req *embedRequest, out *embedded) (*embedResponse, *apiError) {
	b64 := req.EncodingFormat == "base64"
	resp := &embedResponse{Object: "list", Data: make([]embedItem, len(out.items)), Model: out.model,
		Usage: usage{PromptTokens: out.tokens, TotalTokens: out.tokens}}
	for i, it := range out.items {
		if it.Error != nil {
			return nil, itemError(i, it.Error)
		}
		d := embedItem{Object: "embedding", Index: i}
		if k != kindSparse {
			if len(it.Dense) > 0 {
				s.health.dim.Store(int64(len(it.Dense)))
			}
			if req.Dimensions != nil && *req.Dimensions != len(it.Dense) {
				return nil, dimensionsError(*req.Dimensions, len(it.Dense))
			}
			d.Embedding = vector(it.Dense, b64)
		}
		if k != kindDense {
			d.Object = "sparse_embedding"
			if k == kindBoth {
				d.Object = "embedding"
			}
			d.Sparse = &sparse{Indices: []uint32{}, Values: []float32{}}
			if it.Sparse != nil && len(it.Sparse.IDs) != len(it.Sparse.Weights) {
				return nil, newError(http.StatusBadGateway, codeFleetError, "input[%d]: the fleet answered a sparse vector of %d indices and %d values",
					i, len(it.Sparse.IDs), len(it.Sparse.Weights))
			}
			if it.Sparse != nil && len(it.Sparse.IDs) > 0 {
				d.Sparse = &sparse{Indices: it.Sparse.IDs, Values: it.Sparse.Weights}
			}
		}
		if len(it.ColBERT) > 0 {
			d.ColBERT = make([]any, len(it.ColBERT))
			for j, v := range it.ColBERT {
				d.ColBERT[j] = vector(v, b64)
			}
		}
		resp.Data[i] = d
	}
	return resp, nil
}
