package model_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jetembed/jetembed/engine/model"
	"github.com/jetembed/jetembed/engine/model/modeltest"
	"github.com/jetembed/jetembed/internal/safetensors"
)

func writeDir(t *testing.T, s modeltest.Spec) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), s.Name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := modeltest.Write(dir, s); err != nil {
		t.Fatal(err)
	}
	return dir
}

func headsSpec() modeltest.Spec {
	s := modeltest.Tiny
	s.Name, s.Layout = "tiny-heads", model.LayoutHeads
	return s
}

func TestOpenHidden(t *testing.T) {
	s := modeltest.Tiny
	dir := writeDir(t, s)
	m, err := model.Open(dir, model.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if m.Layout != model.LayoutHidden || m.Layout.String() != "hidden" {
		t.Errorf("layout = %v, want hidden", m.Layout)
	}
	if len(m.SHA256) != 64 || m.ID != "tiny@"+m.SHA256[:12] {
		t.Errorf("id = %q, sha = %q", m.ID, m.SHA256)
	}
	want := model.Config{ModelType: "xlm-roberta", HiddenSize: 8, MaxPositionEmbeddings: 8194, VocabSize: 250,
		PadID: 1, BOSID: 0, EOSID: 2, MaxTokens: 8192, Layers: 1, Heads: 1, Intermediate: 8}
	if m.Config != want {
		t.Errorf("config = %+v, want %+v", m.Config, want)
	}
	if got := strings.Join(m.Graph.Inputs, ","); got != "input_ids,attention_mask" {
		t.Errorf("inputs = %s", got)
	}
	if m.Sparse.B != s.SparseB() || len(m.Sparse.W) != 8 || m.Sparse.W[3] != s.SparseW()[3] {
		t.Errorf("sparse head = %+v", m.Sparse)
	}
	if m.ColBERT.Dim != 6 || len(m.ColBERT.W) != 48 || len(m.ColBERT.B) != 6 || m.ColBERT.W[47] != s.ColBERTW()[47] {
		t.Errorf("colbert head dim %d, %d weights, %d biases", m.ColBERT.Dim, len(m.ColBERT.W), len(m.ColBERT.B))
	}
	if m.ONNXPath != filepath.Join(dir, "model.onnx") || m.TokenizerPath != filepath.Join(dir, "tokenizer.json") {
		t.Errorf("paths %s %s", m.ONNXPath, m.TokenizerPath)
	}
}

func TestOpenHeads(t *testing.T) {
	dir := writeDir(t, headsSpec())
	m, err := model.Open(dir, model.Options{VerifyManifest: true, SHA256: ""})
	if err != nil {
		t.Fatal(err)
	}
	if m.Layout != model.LayoutHeads || m.Layout.String() != "heads" {
		t.Errorf("layout = %v, want heads", m.Layout)
	}
	if m.Sparse.W != nil || m.ColBERT.W != nil {
		t.Error("heads layout loaded head weights")
	}
	if !strings.HasPrefix(m.ID, "tiny-heads@") {
		t.Errorf("id = %s", m.ID)
	}
}

func TestOpenPin(t *testing.T) {
	dir := writeDir(t, modeltest.Tiny)
	m, err := model.Open(dir, model.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	for _, pin := range []string{m.SHA256, strings.ToUpper(m.SHA256[:12]), m.SHA256[:1]} {
		if _, err := model.Open(dir, model.Options{SHA256: pin}); err != nil {
			t.Errorf("pin %s: %v", pin, err)
		}
	}
	wrong := "0" + m.SHA256[1:12]
	if m.SHA256[0] == '0' {
		wrong = "1" + m.SHA256[1:12]
	}
	_, err = model.Open(dir, model.Options{SHA256: wrong})
	if !errors.Is(err, model.ErrChecksum) || !strings.Contains(err.Error(), "model.onnx") {
		t.Errorf("wrong pin: %v", err)
	}
	if _, err := model.Open(dir, model.Options{SHA256: "xyz"}); !errors.Is(err, model.ErrInvalid) {
		t.Errorf("non-hex pin: %v", err)
	}
	if _, err := model.Open(dir, model.Options{SHA256: m.SHA256 + "00"}); !errors.Is(err, model.ErrChecksum) {
		t.Errorf("over-long pin: %v", err)
	}
}

// TestOpenBroken breaks a good directory one way at a time and checks the
// error names the culprit.
func TestOpenBroken(t *testing.T) {
	tests := []struct {
		name     string
		spec     modeltest.Spec
		opts     model.Options
		breakDir func(t *testing.T, dir string)
		wantErr  error
		wantText string
	}{
		{"missing config", modeltest.Tiny, model.Options{}, remove("config.json"), model.ErrMissingFile, "config.json"},
		{"missing tokenizer", modeltest.Tiny, model.DefaultOptions(), remove("tokenizer.json"), model.ErrMissingFile, "tokenizer.json"},
		{"missing model", modeltest.Tiny, model.DefaultOptions(), remove("model.onnx"), model.ErrMissingFile, "model.onnx"},
		{"missing sparse head", modeltest.Tiny, model.Options{}, remove("sparse_linear.safetensors"), model.ErrMissingFile, "sparse_linear.safetensors"},
		{"missing colbert head", modeltest.Tiny, model.Options{}, remove("colbert_linear.safetensors"), model.ErrMissingFile, "colbert_linear.safetensors"},
		{"missing manifest", modeltest.Tiny, model.Options{VerifyManifest: true}, remove("manifest.json"), model.ErrMissingFile, "manifest.json"},
		{"tampered tokenizer", modeltest.Tiny, model.DefaultOptions(), write("tokenizer.json", "{}"), model.ErrChecksum, "tokenizer.json"},
		{"missing external data", modeltest.Tiny, model.DefaultOptions(), func(t *testing.T, dir string) {
			write("model.onnx_data", "weights")(t, dir)
			must(t, modeltest.WriteManifest(dir, "tiny", "hidden"))
			remove("model.onnx_data")(t, dir)
		}, model.ErrMissingFile, "model.onnx_data"},
		{"manifest omits a file", modeltest.Tiny, model.Options{VerifyManifest: true}, func(t *testing.T, dir string) {
			remove("colbert_linear.safetensors")(t, dir)
			must(t, modeltest.WriteManifest(dir, "tiny", "hidden"))
			writeHead(t, dir, "colbert_linear.safetensors", []int{6, 8}, 6)
		}, model.ErrInvalid, "colbert_linear.safetensors"},
		{"manifest layout mismatch", modeltest.Tiny, model.DefaultOptions(), func(t *testing.T, dir string) {
			must(t, modeltest.WriteManifest(dir, "tiny", "heads"))
		}, model.ErrLayout, "manifest.json"},
		{"bad manifest", modeltest.Tiny, model.DefaultOptions(), write("manifest.json", "{"), model.ErrInvalid, "manifest.json"},
		{"manifest escapes dir", modeltest.Tiny, model.DefaultOptions(),
			write("manifest.json", `{"format":1,"files":{"../x":"00"}}`), model.ErrInvalid, "../x"},
		{"sparse head of wrong width", modeltest.Tiny, model.Options{}, func(t *testing.T, dir string) {
			writeHead(t, dir, "sparse_linear.safetensors", []int{1, 7}, 1)
		}, model.ErrInvalid, "sparse_linear.safetensors: weight shape [1 7] does not match hidden_size 8"},
		{"sparse head of two rows", modeltest.Tiny, model.Options{}, func(t *testing.T, dir string) {
			writeHead(t, dir, "sparse_linear.safetensors", []int{2, 8}, 2)
		}, model.ErrInvalid, "sparse_linear.safetensors"},
		{"colbert bias mismatch", modeltest.Tiny, model.Options{}, func(t *testing.T, dir string) {
			writeHead(t, dir, "colbert_linear.safetensors", []int{6, 8}, 5)
		}, model.ErrInvalid, "colbert_linear.safetensors: bias shape [5]"},
		{"bad config", modeltest.Tiny, model.Options{}, write("config.json", `{"hidden_size":0,"max_position_embeddings":10,"vocab_size":5}`),
			model.ErrInvalid, "hidden_size 0"},
		{"config pad outside vocab", modeltest.Tiny, model.Options{}, write("config.json", `{"hidden_size":8,"max_position_embeddings":10,"vocab_size":1}`),
			model.ErrInvalid, "special token id 1"},
		{"not onnx", modeltest.Tiny, model.Options{}, write("model.onnx", "\xff\xff\xff"), model.ErrInvalid, "model.onnx"},
		{"neither layout", modeltest.Tiny, model.Options{}, func(t *testing.T, dir string) {
			s := modeltest.Tiny
			s.Layout = model.LayoutHeads
			b := s.ONNX()
			// Rename the heads' outputs so no layout matches.
			b = []byte(strings.ReplaceAll(string(b), "dense_vecs", "dense_xxxx"))
			write("model.onnx", string(b))(t, dir)
		}, model.ErrLayout, "neither"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeDir(t, tt.spec)
			tt.breakDir(t, dir)
			_, err := model.Open(dir, tt.opts)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("err = %q, want it to mention %q", err, tt.wantText)
			}
		})
	}
}

func TestOpenNoDir(t *testing.T) {
	_, err := model.Open(filepath.Join(t.TempDir(), "nope"), model.DefaultOptions())
	if !errors.Is(err, model.ErrMissingFile) || !strings.Contains(err.Error(), "nope") {
		t.Errorf("err = %v", err)
	}
}

func remove(name string) func(*testing.T, string) {
	return func(t *testing.T, dir string) { must(t, os.Remove(filepath.Join(dir, name))) }
}

func write(name, content string) func(*testing.T, string) {
	return func(t *testing.T, dir string) {
		must(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
}

func writeHead(t *testing.T, dir, name string, wShape []int, bLen int) {
	t.Helper()
	must(t, safetensors.WriteFile(filepath.Join(dir, name), map[string]safetensors.Tensor{
		"weight": {Shape: wShape, Data: make([]float32, wShape[0]*wShape[1])},
		"bias":   {Shape: []int{bLen}, Data: make([]float32, bLen)},
	}))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestOpenTestdata opens the committed tiny models that genmodel writes.
func TestOpenTestdata(t *testing.T) {
	for _, tc := range []struct {
		dir    string
		layout model.Layout
	}{{"tiny-hidden", model.LayoutHidden}, {"tiny-heads", model.LayoutHeads}} {
		m, err := model.Open(filepath.Join("..", "..", "testdata", "models", tc.dir), model.DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		if m.Layout != tc.layout || m.Config.HiddenSize != 32 || m.Config.MaxTokens != 8192 ||
			!strings.HasPrefix(m.ID, "bge-m3@") || len(m.ID) != len("bge-m3@")+12 {
			t.Errorf("%s: layout %v, config %+v, id %s", tc.dir, m.Layout, m.Config, m.ID)
		}
		if tc.layout == model.LayoutHidden && (len(m.Sparse.W) != 32 || m.ColBERT.Dim != 32 || len(m.ColBERT.W) != 32*32) {
			t.Errorf("%s: heads %d sparse weights, colbert dim %d", tc.dir, len(m.Sparse.W), m.ColBERT.Dim)
		}
	}
}

// TestFingerprint: the fingerprint (what the result cache's keys name)
// covers every file the model reads: the same directory gives the same
// one, and a tokenizer or a head changed under the same graph gives
// another, while the id (the graph's) stays.
func TestFingerprint(t *testing.T) {
	dir := writeDir(t, modeltest.Tiny)
	open := func() *model.Model {
		t.Helper()
		m, err := model.Open(dir, model.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m0 := open()
	if again := open(); again.Fingerprint() != m0.Fingerprint() {
		t.Fatalf("the same directory: fingerprint %s then %s", m0.Fingerprint(), again.Fingerprint())
	}
	prev := m0.Fingerprint()
	for _, f := range []string{model.TokenizerFile, model.SparseFile} {
		p := filepath.Join(dir, f)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, append(b, ' '), 0o644); err != nil {
			t.Fatal(err)
		}
		m := open()
		if m.ID != m0.ID {
			t.Errorf("%s changed: id %s, want the graph's %s", f, m.ID, m0.ID)
		}
		if m.Fingerprint() == prev {
			t.Errorf("%s changed: the fingerprint stayed %s", f, prev)
		}
		prev = m.Fingerprint()
	}
}
