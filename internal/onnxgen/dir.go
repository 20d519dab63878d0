package onnxgen

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/jetembed/jetembed/internal/safetensors"
)

// ErrTokenizer reports a tokenizer.json the vocabulary size cannot be read
// from.
var ErrTokenizer = errors.New("onnxgen: unusable tokenizer.json")

// ModelName is the name genmodel writes into manifest.json: the models
// stand in for BGE-M3.
const ModelName = "bge-m3"

// VocabSize is the number of token ids a tokenizer.json can produce:
// the larger of its model vocabulary's length and the largest added-token
// id plus one. The embedding table must cover every one of them.
func VocabSize(tokenizerJSON []byte) (int, error) {
	var tok struct {
		Model struct {
			Vocab json.RawMessage `json:"vocab"`
		} `json:"model"`
		AddedTokens []struct {
			ID int `json:"id"`
		} `json:"added_tokens"`
	}
	if err := json.Unmarshal(tokenizerJSON, &tok); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrTokenizer, err)
	}
	// Unigram stores the vocabulary as [[piece, score], ...], WordPiece and
	// BPE as {piece: id}.
	var n int
	var list []json.RawMessage
	var byPiece map[string]int
	switch {
	case json.Unmarshal(tok.Model.Vocab, &list) == nil:
		n = len(list)
	case json.Unmarshal(tok.Model.Vocab, &byPiece) == nil:
		for _, id := range byPiece {
			n = max(n, id+1)
		}
	default:
		return 0, fmt.Errorf("%w: model.vocab is neither a list nor a map", ErrTokenizer)
	}
	for _, a := range tok.AddedTokens {
		n = max(n, a.ID+1)
	}
	if n <= PadID {
		return 0, fmt.Errorf("%w: vocabulary of %d tokens", ErrTokenizer, n)
	}
	return n, nil
}

// hfConfig is config.json in the HuggingFace shape the loader reads.
type hfConfig struct {
	ModelType             string  `json:"model_type"`
	HiddenSize            int     `json:"hidden_size"`
	NumHiddenLayers       int     `json:"num_hidden_layers"`
	NumAttentionHeads     int     `json:"num_attention_heads"`
	IntermediateSize      int     `json:"intermediate_size"`
	MaxPositionEmbeddings int     `json:"max_position_embeddings"`
	VocabSize             int     `json:"vocab_size"`
	PadTokenID            int     `json:"pad_token_id"`
	BOSTokenID            int     `json:"bos_token_id"`
	EOSTokenID            int     `json:"eos_token_id"`
	LayerNormEps          float64 `json:"layer_norm_eps"`
	TypeVocabSize         int     `json:"type_vocab_size"`
}

// manifest is manifest.json: the layout and the sha256 of every file.
type manifest struct {
	Format int               `json:"format"`
	Name   string            `json:"name"`
	Layout Layout            `json:"layout"`
	Files  map[string]string `json:"files"`
}

// WriteDir generates the model for c (its VocabSize taken from tokenizerJSON
// when zero) and writes a complete model directory to dir: model.onnx,
// tokenizer.json, config.json, the head safetensors for the hidden layout,
// and manifest.json. Files of an earlier run that the layout does not use
// are removed, so dir holds exactly what the manifest lists.
func WriteDir(dir string, c Config, tokenizerJSON []byte) error {
	if c.VocabSize == 0 {
		n, err := VocabSize(tokenizerJSON)
		if err != nil {
			return err
		}
		c.VocabSize = n
	}
	m, err := Build(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files := map[string][]byte{
		"model.onnx":     m.ONNX,
		"tokenizer.json": tokenizerJSON,
	}
	if m.Data != nil {
		files[ExternalDataFile] = m.Data
	} else if err := os.Remove(filepath.Join(dir, ExternalDataFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	cfg, err := json.MarshalIndent(hfConfig{
		ModelType: "xlm-roberta", HiddenSize: c.Size.Hidden, NumHiddenLayers: c.Size.Layers,
		NumAttentionHeads: c.Size.Heads, IntermediateSize: c.Size.Intermediate,
		MaxPositionEmbeddings: c.Size.MaxPositions, VocabSize: c.VocabSize,
		PadTokenID: PadID, BOSTokenID: 0, EOSTokenID: 2, LayerNormEps: layerNormEps, TypeVocabSize: 1,
	}, "", "  ")
	if err != nil {
		return err
	}
	files["config.json"] = append(cfg, '\n')
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	heads := []string{"sparse_linear.safetensors", "colbert_linear.safetensors"}
	if c.Layout == LayoutHidden {
		h := c.Size.Hidden
		if err := safetensors.WriteFile(filepath.Join(dir, heads[0]), map[string]safetensors.Tensor{
			"weight": {Shape: []int{1, h}, Data: m.SparseWeight},
			"bias":   {Shape: []int{1}, Data: m.SparseBias},
		}); err != nil {
			return err
		}
		if err := safetensors.WriteFile(filepath.Join(dir, heads[1]), map[string]safetensors.Tensor{
			"weight": {Shape: []int{h, h}, Data: m.ColBERTWeight},
			"bias":   {Shape: []int{h}, Data: m.ColBERTBias},
		}); err != nil {
			return err
		}
	} else {
		for _, name := range heads {
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		heads = nil
	}
	man := manifest{Format: 1, Name: ModelName, Layout: c.Layout, Files: map[string]string{}}
	for name := range files {
		man.Files[name] = sha256Hex(files[name])
	}
	for _, name := range heads {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		man.Files[name] = sha256Hex(data)
	}
	mb, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "manifest.json"), append(mb, '\n'), 0o644)
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
