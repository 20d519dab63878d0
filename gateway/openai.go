package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"

	"github.com/jetembed/jetembed/schema"
)

// embedRequest is the body of POST /v1/embeddings and of the BGE-M3
// endpoints. Fields the OpenAI API has and the gateway does not use (user)
// are accepted and ignored.
type embedRequest struct {
	Input          json.RawMessage `json:"input"`
	Model          string          `json:"model"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
	// Truncate, as in TEI: true (the default) cuts an input over the
	// model's maximum, false refuses it with text_too_long.
	Truncate *bool `json:"truncate"`
	// ColBERT asks the BGE-M3 endpoints for the multi-vector output too;
	// return_colbert_vecs is FlagEmbedding's name for it.
	ColBERT       bool `json:"colbert"`
	ReturnColBERT bool `json:"return_colbert_vecs"`
}

// decodeRequest checks the body of an embeddings call: a JSON object by
// the strict rules, input a string or an array of 1..maxInputs strings,
// encoding_format float or base64.
func decodeRequest(body []byte, c *Config) (*embedRequest, []string, *apiError) {
	var req embedRequest
	if aerr := decodeObject(body, req.fields()); aerr != nil {
		return nil, nil, aerr
	}
	switch req.EncodingFormat {
	case "", "float", "base64":
	default:
		return nil, nil, badParam("encoding_format", codeEncodingFormat, "encoding_format %s is not supported (want float or base64)", short(req.EncodingFormat))
	}
	texts, aerr := parseInput(req.Input, c.MaxInputs)
	if aerr != nil {
		return nil, nil, aerr
	}
	if aerr := checkTexts(texts, c); aerr != nil {
		return nil, nil, aerr
	}
	return &req, texts, nil
}

// fields are the body's fields by their exact names.
func (req *embedRequest) fields() fields {
	return fields{"input": &req.Input, "model": &req.Model, "encoding_format": &req.EncodingFormat,
		"dimensions": &req.Dimensions, "truncate": &req.Truncate, "colbert": &req.ColBERT,
		"return_colbert_vecs": &req.ReturnColBERT}
}

// checkTexts refuses a text over MaxTextBytes before it reaches the fleet.
func checkTexts(texts []string, c *Config) *apiError {
	for i, t := range texts {
		if len(t) > c.MaxTextBytes {
			e := newError(http.StatusRequestEntityTooLarge, string(schema.CodeJobTooLarge), "input[%d] is %d bytes, over the limit of %d", i, len(t), c.MaxTextBytes)
			e.Param = "input"
			return e
		}
	}
	return nil
}

// parseInput accepts a string or an array of strings; token-id inputs (an
// array of integers, or of arrays of integers) are refused by name.
func parseInput(raw json.RawMessage, maxInputs int) ([]string, *apiError) {
	return parseInputs(raw, "input", maxInputs)
}

// parseInputs is parseInput for the field name (input, or TEI's inputs).
func parseInputs(raw json.RawMessage, name string, maxInputs int) ([]string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, badParam(name, codeInvalidInput, "%s is required: a string or an array of strings", name)
	}
	var one string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &one); err != nil {
			return nil, badParam(name, codeInvalidInput, "%s is not a valid JSON string", name)
		}
		return []string{one}, nil
	}
	if raw[0] != '[' {
		return nil, badParam(name, codeInvalidInput, "%s must be a string or an array of strings", name)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badParam(name, codeInvalidInput, "%s is not a valid JSON array", name)
	}
	switch {
	case len(items) == 0:
		return nil, badParam(name, codeInvalidInput, "%s is an empty array: give at least one string", name)
	case len(items) > maxInputs:
		return nil, badParam(name, codeTooManyInputs, "%s has %d items, over the limit of %d a call: split it into several calls", name, len(items), maxInputs)
	}
	texts := make([]string, len(items))
	for i, it := range items {
		it = bytes.TrimSpace(it)
		if len(it) > 0 && (it[0] == '[' || it[0] == '-' || it[0] >= '0' && it[0] <= '9') {
			return nil, badParam(name, codeTokenIDs, "%s[%d] is token ids: this gateway embeds text only (it tokenizes with the model's own tokenizer); send the text", name, i)
		}
		if err := json.Unmarshal(it, &texts[i]); err != nil || len(it) == 0 || it[0] != '"' {
			return nil, badParam(name, codeInvalidInput, "%s[%d] is not a string", name, i)
		}
	}
	return texts, nil
}

// The response envelope of every embeddings endpoint: OpenAI's list.
type embedResponse struct {
	Object string      `json:"object"`
	Data   []embedItem `json:"data"`
	Model  string      `json:"model"`
	Usage  usage       `json:"usage"`
}

type usage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

// embedItem is one input's vectors: embedding (dense) on /v1/embeddings,
// sparse on /v1/sparse-embeddings, both (and colbert when asked for) on
// /v1/embeddings:both. A vector is an array of numbers, or with
// encoding_format base64 the base64 of its little-endian float32 bytes.
type embedItem struct {
	Object    string  `json:"object"`
	Index     int     `json:"index"`
	Embedding any     `json:"embedding,omitempty"`
	Sparse    *sparse `json:"sparse,omitempty"`
	ColBERT   []any   `json:"colbert,omitempty"`
}

type sparse struct {
	Indices []uint32  `json:"indices"`
	Values  []float32 `json:"values"`
}

// vector returns v in the requested encoding.
func vector(v []float32, base64Format bool) any {
	if !base64Format {
		if v == nil {
			return []float32{}
		}
		return v
	}
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(b)
}
