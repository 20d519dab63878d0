// Package modeltest writes tiny, valid jetembed model directories for tests
// of the loader and the ONNX Runtime session, so they need neither a real
// BGE-M3 export nor the genmodel command. The graphs are a few ONNX
// operators whose results [Spec.HiddenState] reproduces in Go.
//
// It imports engine/model and internal/safetensors; only tests use it.
package modeltest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/jetembed/jetembed/engine/model"
	"github.com/jetembed/jetembed/internal/safetensors"
)

// Spec describes a tiny model directory.
type Spec struct {
	Name       string
	Layout     model.Layout
	Hidden     int // H
	ColBERTDim int // C
	Vocab      int
	MaxPos     int // max_position_embeddings
	// Layers adds that many H x H MatMul+Sin nodes after the hidden state,
	// to make runs slow (cancellation tests). [Spec.HiddenState] and the
	// heads are only reproducible with Layers == 0.
	Layers int
	// Int32 declares the inputs int32 instead of int64.
	Int32 bool
	// TokenTypes and Positions add the BERT-family inputs token_type_ids
	// (added to x as they are) and position_ids (x += position/1000), so a
	// wrong feed shows in [Spec.HiddenStateAt].
	TokenTypes, Positions bool
	// SentenceTransformers names the hidden state token_embeddings and adds
	// the pooled sentence_embedding output, as sentence-transformers' ONNX
	// exports do (hidden layout only).
	SentenceTransformers bool
}

// Tiny is a small hidden-state model; set Layout for the other one.
var Tiny = Spec{Name: "tiny", Layout: model.LayoutHidden, Hidden: 8, ColBERTDim: 6, Vocab: 250, MaxPos: 8194}

// Weights of the graph and the heads, derived from the spec so tests can
// recompute outputs.
func (s Spec) hiddenW() []float32 { return ramp(s.Hidden, 0.5, 0.25) }
func (s Spec) hiddenB() []float32 { return ramp(s.Hidden, -0.3, 0.1) }

// SparseW and SparseB are the sparse head, Linear(H, 1).
func (s Spec) SparseW() []float32 { return ramp(s.Hidden, -0.2, 0.07) }

// SparseB is the sparse head's bias.
func (s Spec) SparseB() float32 { return 0.05 }

// ColBERTW is the ColBERT head's weight, C x H row-major.
func (s Spec) ColBERTW() []float32 { return ramp(s.ColBERTDim*s.Hidden, -0.9, 0.031) }

// ColBERTB is the ColBERT head's bias.
func (s Spec) ColBERTB() []float32 { return ramp(s.ColBERTDim, 0.01, 0.02) }

func ramp(n int, start, step float32) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = start + step*float32(i)
	}
	return out
}

// HiddenState is the graph's hidden state for one position:
// sin((id/100 + mask) * w + b), element-wise over H.
func (s Spec) HiddenState(id, mask int64) []float32 {
	x := float32(id)*0.01 + float32(mask)
	w, b := s.hiddenW(), s.hiddenB()
	out := make([]float32, s.Hidden)
	for i := range out {
		out[i] = float32(math.Sin(float64(x*w[i] + b[i])))
	}
	return out
}

// HiddenStateAt is [Spec.HiddenState] of a graph with Positions (and
// TokenTypes fed zeros): sin((id/100 + mask + pos/1000) * w + b).
func (s Spec) HiddenStateAt(id, mask, pos int64) []float32 {
	x := float32(id)*0.01 + float32(mask) + float32(pos)*0.001
	w, b := s.hiddenW(), s.hiddenB()
	out := make([]float32, s.Hidden)
	for i := range out {
		out[i] = float32(math.Sin(float64(x*w[i] + b[i])))
	}
	return out
}

// Write creates the model directory for s in dir (which must exist): the
// graph, a placeholder tokenizer.json, config.json, the head weights for the
// hidden layout and a manifest of them all.
func Write(dir string, s Spec) error {
	files := map[string][]byte{
		model.ONNXFile:      s.ONNX(),
		model.TokenizerFile: []byte(`{"version":"1.0","model":{"type":"Unigram","vocab":[]}}`),
	}
	cfg, err := json.Marshal(map[string]any{
		"model_type": "xlm-roberta", "hidden_size": s.Hidden, "num_hidden_layers": 1,
		"num_attention_heads": 1, "intermediate_size": s.Hidden, "max_position_embeddings": s.MaxPos,
		"vocab_size": s.Vocab, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2,
		"layer_norm_eps": 1e-5, "type_vocab_size": 1,
	})
	if err != nil {
		return err
	}
	files[model.ConfigFile] = cfg
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	if s.Layout == model.LayoutHidden {
		heads := map[string]map[string]safetensors.Tensor{
			model.SparseFile: {
				"weight": {Shape: []int{1, s.Hidden}, Data: s.SparseW()},
				"bias":   {Shape: []int{1}, Data: []float32{s.SparseB()}},
			},
			model.ColBERTFile: {
				"weight": {Shape: []int{s.ColBERTDim, s.Hidden}, Data: s.ColBERTW()},
				"bias":   {Shape: []int{s.ColBERTDim}, Data: s.ColBERTB()},
			},
		}
		for name, ts := range heads {
			if err := safetensors.WriteFile(filepath.Join(dir, name), ts); err != nil {
				return err
			}
		}
	}
	return WriteManifest(dir, s.Name, s.Layout.String())
}

// WriteManifest (re)writes manifest.json with the sha256 of every other
// regular file in dir.
func WriteManifest(dir, name, layout string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	sums := map[string]string{}
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == model.ManifestFile {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		sums[e.Name()] = hex.EncodeToString(sum[:])
	}
	b, err := json.MarshalIndent(model.Manifest{Format: 1, Name: name, Layout: layout, Files: sums}, "", "  ")
	if err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, model.ManifestFile), b, 0o644)
}
