//go:build cgo

package ort

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/model"
	"github.com/jetembed/jetembed/internal/onnxgen"
)

// int8Fixture is a model the int8 gates hold on.
type int8Fixture struct {
	name string
	open func(t *testing.T) *model.Model
}

func openModel(t *testing.T, dir string, o model.Options) *model.Model {
	t.Helper()
	m, err := model.Open(dir, o)
	must(t, err)
	return m
}

// int8Fixtures are every fixture of the gates: the generator's models
// (float32 and float16 weights, both layouts) and the torch exports
// (hidden-state, its float16 twin, three-head).
func int8Fixtures() []int8Fixture {
	dir := func(name string, o model.Options) func(t *testing.T) *model.Model {
		return func(t *testing.T) *model.Model { return openModel(t, testdataModel(name), o) }
	}
	gen := func(c onnxgen.Config) func(t *testing.T) *model.Model {
		return func(t *testing.T) *model.Model {
			return openModel(t, genModel(t, c), model.DefaultOptions())
		}
	}
	fp16 := model.DefaultOptions()
	fp16.File = "onnx/model_fp16.onnx"
	vocab := onnxgenVocab()
	return []int8Fixture{
		{"tiny-hidden", dir("tiny-hidden", model.DefaultOptions())},
		{"tiny-heads", dir("tiny-heads", model.DefaultOptions())},
		{"gen-fp16-heads", gen(onnxgen.Config{Size: onnxgen.Tiny, Layout: onnxgen.LayoutHeads, FP16: true, Seed: 42, VocabSize: vocab})},
		{"torch-m3", dir("torch-m3", model.DefaultOptions())},
		{"torch-m3-fp16", dir("torch-m3", fp16)},
		{"torch-m3-heads", dir("torch-m3-heads", model.DefaultOptions())},
	}
}

// onnxgenVocab is the committed tiny models' vocabulary size.
func onnxgenVocab() int {
	b, err := os.ReadFile(filepath.Join(testdataModel("tiny-hidden"), "config.json"))
	if err != nil {
		return 250002
	}
	var c struct {
		Vocab int `json:"vocab_size"`
	}
	if json.Unmarshal(b, &c) != nil || c.Vocab == 0 {
		return 250002
	}
	return c.Vocab
}

// mixedCorpus is the mixed multilingual corpus of torch-m3-reference.json
// (32 texts, many scripts, 3 to 193 tokens) as token ids.
func mixedCorpus(t testing.TB) [][]int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "models", "torch-m3-reference.json"))
	must(t, err)
	var ref struct {
		Items []struct {
			IDs []int64 `json:"ids"`
		} `json:"items"`
	}
	must(t, json.Unmarshal(b, &ref))
	out := make([][]int64, len(ref.Items))
	for i, it := range ref.Items {
		out[i] = it.IDs
	}
	if len(out) < 32 {
		t.Fatalf("mixed corpus of %d texts", len(out))
	}
	return out
}

// chunkOf pads texts into one chunk.
func chunkOf(texts [][]int64, pad int) engine.RunInput {
	seq := 0
	for _, tx := range texts {
		seq = max(seq, len(tx))
	}
	in := engine.RunInput{Batch: len(texts), Seq: seq, IDs: make([]int64, len(texts)*seq), Mask: make([]int64, len(texts)*seq)}
	for r, tx := range texts {
		for i := range seq {
			k := r*seq + i
			if i < len(tx) {
				in.IDs[k], in.Mask[k] = tx[i], 1
			} else {
				in.IDs[k] = int64(pad)
			}
		}
	}
	return in
}

// corpusChunks are the corpus in chunks of 8 texts of similar length, as
// the packer forms them.
func corpusChunks(texts [][]int64, pad int) []engine.RunInput {
	sorted := append([][]int64(nil), texts...)
	for i := range sorted {
		for j := i + 1; j < len(sorted); j++ {
			if len(sorted[j]) < len(sorted[i]) {
				sorted[i], sorted[j] = sorted[j], sorted[i]
			}
		}
	}
	var out []engine.RunInput
	for i := 0; i < len(sorted); i += 8 {
		out = append(out, chunkOf(sorted[i:min(i+8, len(sorted))], pad))
	}
	return out
}

func openPrecision(t *testing.T, m *model.Model, pr Precision) (*Session, AttentionPlan) {
	t.Helper()
	s, err := Open(m, Provider{IntraOpThreads: 1, Precision: pr})
	must(t, err)
	t.Cleanup(func() { s.Close() })
	return s, s.Attention()
}

// TestInt8Gates holds int8 to every fidelity gate on the mixed
// multilingual corpus, for every fixture, and logs the figures
// (BENCHMARKS.md quotes them).
func TestInt8Gates(t *testing.T) {
	texts := mixedCorpus(t)
	for _, fx := range int8Fixtures() {
		t.Run(fx.name, func(t *testing.T) {
			resetPlans(t)
			m := fx.open(t)
			fp32, _ := openPrecision(t, m, PrecisionFP32)
			int8, plan := openPrecision(t, m, PrecisionInt8)
			if !plan.Precision.Int8 || plan.Precision.Warn {
				t.Fatalf("int8 refused: %s", plan.Precision)
			}
			t.Logf("%s", plan.Precision)
			var fid Fidelity
			same := true
			for _, in := range corpusChunks(texts, m.Config.PadID) {
				want, err := fp32.Run(context.Background(), in)
				must(t, err)
				got, err := int8.Run(context.Background(), in)
				must(t, err)
				CompareRuns(&fid, m, in, want, got)
				same = same && bytes.Equal(rowBytes(want, 0, in.Seq, 2), rowBytes(got, 0, in.Seq, 2))
			}
			if same {
				t.Fatal("int8 gives float32's bytes: the rewrite did not run")
			}
			t.Logf("%s mixed corpus: %s", fx.name, fid)
			if fid.Texts != len(texts) {
				t.Fatalf("compared %d texts of %d", fid.Texts, len(texts))
			}
			if err := fid.Check(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestInt8BatchIndependent runs each corpus text alone and among 39
// others (the rest of the corpus and copies, longer texts padding it):
// its int8 vectors must be the same bytes, as float32's are.
func TestInt8BatchIndependent(t *testing.T) {
	texts := mixedCorpus(t)
	for _, name := range []string{"tiny-heads", "torch-m3"} {
		t.Run(name, func(t *testing.T) {
			resetPlans(t)
			m := openModel(t, testdataModel(name), model.DefaultOptions())
			s, plan := openPrecision(t, m, PrecisionInt8)
			if !plan.Precision.Int8 {
				t.Fatalf("int8 refused: %s", plan.Precision)
			}
			crowd := append(append([][]int64(nil), texts...), texts[:8]...) // 40 texts
			many, err := s.Run(context.Background(), chunkOf(crowd, m.Config.PadID))
			must(t, err)
			manyIn := chunkOf(crowd, m.Config.PadID)
			for i, tx := range texts[:12] {
				in := chunkOf([][]int64{tx}, m.Config.PadID)
				one, err := s.Run(context.Background(), in)
				must(t, err)
				if a, b := rowBytes(one, 0, in.Seq, len(tx)), rowBytes(many, i, manyIn.Seq, len(tx)); !bytes.Equal(a, b) {
					t.Fatalf("text %d (%d tokens): alone and among 39 others differ", i, len(tx))
				}
			}
		})
	}
}

// rowBytes are the bytes of row r's outputs at its n real tokens.
func rowBytes(o engine.RunOutput, r, seq, n int) []byte {
	var b []byte
	put := func(v []float32) {
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
		}
	}
	if o.Hidden != nil {
		put(o.Hidden[r*seq*o.Dim : (r*seq+n)*o.Dim])
	}
	if o.Dense != nil {
		put(o.Dense[r*o.Dim : (r+1)*o.Dim])
		put(o.Sparse[r*seq : r*seq+n])
		put(o.ColBERT[r*o.ColBERTLen*o.ColBERTDim : (r*o.ColBERTLen+n-1)*o.ColBERTDim])
	}
	return b
}

// TestInt8CanaryRefusesBrokenRewrite breaks the rewrite (it quantizes a
// model of other weights, same interface): the canary must refuse int8,
// warn, and leave sessions running float32.
func TestInt8CanaryRefusesBrokenRewrite(t *testing.T) {
	resetPlans(t)
	other := genModel(t, onnxgen.Config{Size: onnxgen.Tiny, Layout: onnxgen.LayoutHidden, Seed: 7, VocabSize: onnxgenVocab()})
	rewriteInt8 = func(string, model.Int8Options) (*model.Int8Rewrite, error) {
		return model.RewriteInt8(filepath.Join(other, "model.onnx"), model.Int8Options{Attention: true})
	}
	m := openModel(t, testdataModel("tiny-hidden"), model.DefaultOptions())
	s, plan := openPrecision(t, m, PrecisionInt8)
	pp := plan.Precision
	if pp.Int8 || !pp.Warn || !strings.Contains(pp.Note, "int8 refused") {
		t.Fatalf("broken rewrite kept: %s", pp)
	}
	t.Logf("%s", pp)
	rewriteInt8 = model.RewriteInt8
	ref, _ := openDir(t, testdataModel("tiny-hidden"), Provider{IntraOpThreads: 1})
	in := input(3, 17, []int{17, 9, 2})
	a, err := s.Run(context.Background(), in)
	must(t, err)
	b, err := ref.Run(context.Background(), in)
	must(t, err)
	if !bytes.Equal(rowBytes(a, 0, 17, 17), rowBytes(b, 0, 17, 17)) {
		t.Fatal("after the refusal the session does not run float32")
	}
}

// TestInt8OnGPUProvidersRunsFP32: int8 asked of CUDA or TensorRT runs
// float32 with a warning, decided before any GPU is touched.
func TestInt8OnGPUProvidersRunsFP32(t *testing.T) {
	m := openModel(t, testdataModel("tiny-hidden"), model.DefaultOptions())
	for _, k := range []Kind{CUDA, TensorRT} {
		p := Provider{Kind: k, Precision: PrecisionInt8}
		must(t, p.Validate())
		pp, s := decidePrecision(m, p, AttentionPlan{}, nil)
		if pp.Int8 || !pp.Warn || s != nil || !strings.Contains(pp.Note, string(k)+" runs float32") {
			t.Fatalf("%s: %s", k, pp)
		}
	}
	if err := (Provider{Precision: "int4"}).Validate(); err == nil {
		t.Fatal("precision int4 validated")
	}
}

// TestInt8QuantizedGraphRunsAsIs: a graph quantized as exported (here the
// rewrite's own output, saved as model_int8.onnx and chosen as
// --model-file does) is neither rewritten nor canaried: int8 runs it as
// it is, and fp32 too.
func TestInt8QuantizedGraphRunsAsIs(t *testing.T) {
	resetPlans(t)
	src := testdataModel("tiny-heads")
	rw, err := model.RewriteInt8(filepath.Join(src, "model.onnx"), model.Int8Options{})
	must(t, err)
	dir := t.TempDir()
	for _, f := range []string{"config.json", "tokenizer.json"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
	}
	must(t, os.WriteFile(filepath.Join(dir, "model_int8.onnx"), rw.ONNX, 0o644))
	if q, err := model.Quantized(filepath.Join(dir, "model_int8.onnx")); err != nil || !q {
		t.Fatalf("Quantized = %v, %v", q, err)
	}
	o := model.DefaultOptions()
	o.File = "model_int8.onnx"
	m := openModel(t, dir, o)
	rewriteInt8 = func(string, model.Int8Options) (*model.Int8Rewrite, error) {
		t.Fatal("a quantized graph was rewritten")
		return nil, nil
	}
	s, plan := openPrecision(t, m, PrecisionInt8)
	if pp := plan.Precision; !pp.Int8 || !pp.AsExported || pp.Warn {
		t.Fatalf("plan %s", pp)
	}
	rewriteInt8 = model.RewriteInt8
	ref, _ := openPrecision(t, openModel(t, src, model.DefaultOptions()), PrecisionInt8)
	in := input(2, 9, []int{9, 4})
	a, err := s.Run(context.Background(), in)
	must(t, err)
	b, err := ref.Run(context.Background(), in)
	must(t, err)
	var fid Fidelity
	CompareRuns(&fid, m, in, b, a)
	if err := fid.Check(); err != nil || fid.DenseMin < 0.99999 {
		t.Fatalf("the quantized graph as exported against the rewrite: %v (%s)", err, fid)
	}
	if _, err := model.RewriteInt8(filepath.Join(dir, "model_int8.onnx"), model.Int8Options{}); !errors.Is(err, model.ErrQuantized) {
		t.Fatalf("rewriting a quantized graph: %v", err)
	}
}
