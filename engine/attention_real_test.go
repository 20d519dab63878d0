package engine_test

import (
	"bufio"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/model"
	"github.com/jetembed/jetembed/engine/ort"
	"github.com/jetembed/jetembed/engine/tokenizer"
	"github.com/jetembed/jetembed/internal/onnxgen"
)

// mixedCorpus is scripts/mixed-corpus.py's kind of corpus, smaller: texts
// of the tokenizer parity corpus (many scripts) as they are, and
// paragraphs of 50-350 of its words.
func mixedCorpus(t *testing.T, n int) []string {
	t.Helper()
	f, err := os.Open(filepath.Join("tokenizer", "testdata", "parity", "corpus.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines, words []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec struct{ Text string }
		if json.Unmarshal(sc.Bytes(), &rec) == nil && strings.TrimSpace(rec.Text) != "" {
			lines = append(lines, rec.Text)
			words = append(words, strings.Fields(rec.Text)...)
		}
	}
	r := rand.New(rand.NewPCG(13, 0))
	var texts []string
	for range n {
		if r.Float64() < 0.6 {
			texts = append(texts, lines[r.IntN(len(lines))])
			continue
		}
		k := 50 + r.IntN(300)
		at := r.IntN(len(words) - k)
		texts = append(texts, strings.Join(words[at:at+k], " "))
	}
	return texts
}

// attentionModels are the directories the fused-vs-graph test runs: the
// committed ones the loader opens (the generated models, and the
// torch.onnx.export fixtures where they are present) and generated
// float16 ones in both layouts.
func attentionModels(t *testing.T) map[string]string {
	t.Helper()
	dirs := map[string]string{}
	root := filepath.Join("..", "testdata", "models")
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			dirs[e.Name()] = filepath.Join(root, e.Name())
		}
	}
	tok, err := os.ReadFile(filepath.Join("..", "testdata", "tokenizers", "xlmr-unigram.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []onnxgen.Layout{onnxgen.LayoutHidden, onnxgen.LayoutHeads} {
		dir := filepath.Join(t.TempDir(), "fp16-"+string(l))
		if err := onnxgen.WriteDir(dir, onnxgen.Config{Size: onnxgen.Tiny, Layout: l, FP16: true, Seed: 42}, tok); err != nil {
			t.Fatal(err)
		}
		dirs["fp16-"+string(l)] = dir
	}
	return dirs
}

// TestFusedAttentionVectors embeds a mixed multilingual corpus through two
// engines over the same model, one whose sessions run the rewritten
// attention and one the graph's: dense, sparse and ColBERT vectors must
// agree within 1e-4, in both layouts, float32 and float16 weights, and
// on any committed torch export. The fused engine also packs differently
// (its memory model has no S^2 term), so padded chunks are compared with
// texts run alone.
func TestFusedAttentionVectors(t *testing.T) {
	initORT(t)
	texts := mixedCorpus(t, 32)
	for name, dir := range attentionModels(t) {
		t.Run(name, func(t *testing.T) {
			m, err := model.Open(dir, model.Options{})
			if err != nil {
				t.Skipf("the loader does not open %s: %v", dir, err)
			}
			tk, err := tokenizer.Load(m.TokenizerPath)
			if err != nil {
				t.Fatal(err)
			}
			open := func(a ort.Attention) *engine.Engine {
				p := ort.Provider{IntraOpThreads: 1, Attention: a}
				plan, err := ort.PlanAttention(m, p)
				if err != nil {
					t.Fatal(err)
				}
				cfg := engine.Config{NoWarmup: true, Sessions: 2, PadExact: true}
				if plan.Fused {
					cfg.Attention = engine.AttentionFused
				}
				if plan.Fused != (a == ort.AttentionFused) {
					t.Fatalf("--attention %s: %s", a, plan)
				}
				e, err := engine.New(context.Background(), cfg, engine.TokenizerFunc(tk.EncodeIDs), m, func(int) (engine.Runner, error) {
					return ort.Open(m, p)
				})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { e.Close() })
				return e
			}
			fused, graph := open(ort.AttentionFused), open(ort.AttentionGraph)
			in := make([]engine.Text, len(texts))
			for i, s := range texts {
				in[i] = engine.Text{Text: s, Outputs: all, Truncate: true}
			}
			want, _, err := graph.Embed(context.Background(), in, engine.Call{})
			if err != nil {
				t.Fatal(err)
			}
			got, rep, err := fused.Embed(context.Background(), in, engine.Call{})
			if err != nil {
				t.Fatal(err)
			}
			padded := 0
			for _, c := range rep.Chunks {
				if c.Batch > 1 {
					padded++
				}
			}
			if padded == 0 {
				t.Errorf("no chunk of the fused engine held more than one text: %+v", rep.Chunks)
			}
			worst := 0.0
			for i := range in {
				d, err := compare(want[i], got[i])
				if err != nil {
					t.Fatalf("text %d: %v", i, err)
				}
				worst = max(worst, d)
			}
			if worst > 1e-4 {
				t.Errorf("fused vectors differ from the graph's by %g", worst)
			}
			t.Logf("%d texts, %d chunks (%d of several texts): largest difference %.2g", len(in), len(rep.Chunks), padded, worst)
		})
	}
}
