package engine_test

import (
	"context"
	"slices"
	"testing"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/model"
	"github.com/jetembed/jetembed/engine/model/modeltest"
	"github.com/jetembed/jetembed/engine/ort"
	"github.com/jetembed/jetembed/engine/tokenizer"
)

// TestTorchReference runs the torch-made fixtures (an independent export:
// torch.onnx.export of an encoder written after transformers'
// modeling_xlm_roberta, weights in external data, heads from torch.save)
// through the real tokenizer, ONNX Runtime and the engine, and compares
// dense, sparse and ColBERT with torch's float64 vectors on a mixed
// multilingual corpus: the BAAI/bge-m3 snapshot layout (hidden-state graph
// in onnx/, heads read from the .pt files in Go), the same snapshot in the
// Hugging Face cache layout opened by repo id, and the three-head export
// whose graph also takes token_type_ids and position_ids.
func TestTorchReference(t *testing.T) {
	initORT(t)
	ref := modeltest.TorchReference(t)
	hub, _ := modeltest.HFCache(t, modeltest.TorchDir("torch-m3"), "BAAI/bge-m3")
	for _, tc := range []struct {
		name, ref string
		opts      model.Options
		tol       float64
	}{
		{"snapshot", modeltest.TorchDir("torch-m3"), model.DefaultOptions(), 1e-4},
		{"hf cache", "BAAI/bge-m3", model.DefaultOptions(), 1e-4},
		{"three heads with token types and positions", modeltest.TorchDir("torch-m3-heads"), model.DefaultOptions(), 1e-4},
		// float16 weights: the rounding of 2^-11 shows, the structure not.
		{"fp16 variant", modeltest.TorchDir("torch-m3"), model.Options{File: "model_fp16.onnx"}, 1e-2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("HF_HUB_CACHE", hub)
			m, err := model.Open(tc.ref, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			tok, err := tokenizer.Load(m.TokenizerPath)
			if err != nil {
				t.Fatal(err)
			}
			cfg := engine.Config{NoWarmup: true, MaxBatch: 8}
			if unk, ok := tok.TokenToID("<unk>"); ok {
				cfg.SparseSkip = []int32{unk}
			}
			e, err := engine.New(context.Background(), cfg, engine.TokenizerFunc(tok.EncodeIDs), m, func(int) (engine.Runner, error) {
				return ort.Open(m, ort.Provider{IntraOpThreads: 1})
			})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			texts := make([]engine.Text, len(ref))
			for i, it := range ref {
				texts[i] = engine.Text{Text: it.Text, Outputs: all}
			}
			got, _, err := e.Embed(context.Background(), texts, engine.Call{})
			if err != nil {
				t.Fatal(err)
			}
			worst := 0.0
			defer func() { t.Logf("largest difference from torch's float64: %.3g", worst) }()
			for i, it := range ref {
				g := got[i]
				if g.Err != nil {
					t.Fatalf("text %d %q: %v", i, it.Text, g.Err)
				}
				if ids, _ := tok.EncodeIDs(it.Text, m.Config.MaxTokens); g.Tokens != len(it.IDs) || !slices.Equal(ids, it.IDs) {
					t.Errorf("text %d %q: %d tokens %v, HF tokenizers has %v", i, it.Text, g.Tokens, ids, it.IDs)
				}
				d, err := it.Check(g.Dense, g.SparseIDs, g.SparseWeights, g.ColBERT, g.ColBERTDim, tc.tol)
				worst = max(worst, d)
				if err != nil {
					t.Errorf("text %d %q (%d tokens): %v", i, it.Text, len(it.IDs), err)
				}
			}
		})
	}
}
