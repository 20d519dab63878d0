package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// file is the part of tokenizer.json jetembed reads.
type file struct {
	Truncation *struct {
		Direction string `json:"direction"`
		MaxLength int    `json:"max_length"`
	} `json:"truncation"`
	Padding       *padding        `json:"padding"`
	AddedTokens   []addedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	Model         json.RawMessage `json:"model"`
	PostProcessor json.RawMessage `json:"post_processor"`
}

// padding is the part of tokenizer.json's padding section jetembed reads:
// the engine pads batches itself, with this id.
type padding struct {
	PadID int32 `json:"pad_id"`
}

// Load reads a tokenizer.json file. When the file sets no truncation, a
// tokenizer_config.json beside it may supply the default maximum through
// model_max_length, as transformers does.
func Load(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := FromJSON(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	if t.maxTokens == 0 {
		t.maxTokens = configMaxLength(filepath.Join(filepath.Dir(path), "tokenizer_config.json"))
	}
	return t, nil
}

// configMaxLength is model_max_length from a tokenizer_config.json, or 0.
// transformers writes a huge number (1e30) for "no limit"; that reads as 0.
func configMaxLength(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var cfg struct {
		ModelMaxLength float64 `json:"model_max_length"`
	}
	if json.Unmarshal(data, &cfg) != nil || cfg.ModelMaxLength <= 0 || cfg.ModelMaxLength > 1<<24 {
		return 0
	}
	return int(cfg.ModelMaxLength)
}

// FromJSON builds a Tokenizer from the contents of a tokenizer.json. A
// component type jetembed does not implement fails with [ErrUnsupported].
func FromJSON(data []byte) (*Tokenizer, error) {
	var f file
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	t := &Tokenizer{pad: -1}
	var err error
	if t.norm, err = buildNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if t.pre, err = buildPreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if t.model, err = buildModel(f.Model); err != nil {
		return nil, err
	}
	if err := t.setAddedTokens(f.AddedTokens); err != nil {
		return nil, err
	}
	if t.post, err = buildPostProcessor(f.PostProcessor, t.TokenToID); err != nil {
		return nil, err
	}
	if f.Truncation != nil {
		if f.Truncation.MaxLength <= 0 {
			return nil, fmt.Errorf("tokenizer.json: truncation max_length %d", f.Truncation.MaxLength)
		}
		t.maxTokens = f.Truncation.MaxLength
		switch f.Truncation.Direction {
		case "", "Right":
		case "Left":
			t.truncLeft = true
		default:
			return nil, fmt.Errorf("%w: truncation direction %q", ErrUnsupported, f.Truncation.Direction)
		}
	}
	t.setSpecials(f.Padding)
	t.scratch.New = func() any { return new(scratch) }
	return t, nil
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

func knownNames[F any](m map[string]F) map[string]bool {
	known := make(map[string]bool, len(m))
	for n := range m {
		known[n] = true
	}
	return known
}

// buildNormalizer returns nil for a null normalizer.
func buildNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	name, err := componentType(raw)
	if err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	f, ok := normalizers[name]
	if !ok {
		return nil, unsupported("normalizer", name, knownNames(normalizers))
	}
	return f(raw)
}

// buildPreTokenizer returns nil for a null pre-tokenizer.
func buildPreTokenizer(raw json.RawMessage) (preTokenizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	name, err := componentType(raw)
	if err != nil {
		return nil, fmt.Errorf("pre-tokenizer: %w", err)
	}
	f, ok := preTokenizers[name]
	if !ok {
		return nil, unsupported("pre-tokenizer", name, knownNames(preTokenizers))
	}
	return f(raw)
}

func buildModel(raw json.RawMessage) (model, error) {
	if isNull(raw) {
		return nil, fmt.Errorf("tokenizer.json: no model")
	}
	name, err := componentType(raw)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if name == "" {
		name = inferModelType(raw)
	}
	f, ok := models[name]
	if !ok {
		return nil, unsupported("model", name, knownNames(models))
	}
	return f(raw)
}

// inferModelType names the model of older files that omit "type", the way
// HF's untagged deserializer tells them apart.
func inferModelType(raw json.RawMessage) string {
	var probe map[string]json.RawMessage
	if json.Unmarshal(raw, &probe) != nil {
		return ""
	}
	switch {
	case probe["merges"] != nil:
		return "BPE"
	case bytes.HasPrefix(bytes.TrimSpace(probe["vocab"]), []byte("[")):
		return "Unigram"
	case probe["continuing_subword_prefix"] != nil || probe["max_input_chars_per_word"] != nil:
		return "WordPiece"
	case probe["vocab"] != nil:
		return "WordLevel"
	}
	return ""
}

// buildPostProcessor returns nil for a null post-processor.
func buildPostProcessor(raw json.RawMessage, vocab func(string) (int32, bool)) (postProcessor, error) {
	if isNull(raw) {
		return nil, nil
	}
	name, err := componentType(raw)
	if err != nil {
		return nil, fmt.Errorf("post-processor: %w", err)
	}
	f, ok := postProcessors[name]
	if !ok {
		return nil, unsupported("post-processor", name, knownNames(postProcessors))
	}
	return f(raw, vocab)
}
