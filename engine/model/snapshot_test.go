package model_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/jetembed/jetembed/engine/model"
	"github.com/jetembed/jetembed/engine/model/modeltest"
)

// copyDir copies a committed fixture, so a test may change it.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	must(t, filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	}))
	return dst
}

func sha256Of(t *testing.T, paths ...string) string {
	t.Helper()
	h := sha256.New()
	for _, p := range paths {
		f, err := os.Open(p)
		must(t, err)
		_, err = io.Copy(h, f)
		f.Close()
		must(t, err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func filePaths(m *model.Model) []string {
	var out []string
	for _, f := range m.Files {
		out = append(out, f.Role+"="+f.Path)
	}
	return out
}

// TestOpenSnapshot opens the BAAI/bge-m3 snapshot layout as
// `huggingface-cli download` leaves it: no manifest, the graph and its
// external data under onnx/, the heads as torch.save files at the root.
func TestOpenSnapshot(t *testing.T) {
	dir := modeltest.TorchDir("torch-m3")
	m, err := model.Open(dir, model.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"graph=onnx/model.onnx", "external data=onnx/model.onnx_data", "tokenizer=onnx/tokenizer.json",
		"config=onnx/config.json", "sparse head=sparse_linear.pt", "colbert head=colbert_linear.pt"}
	if got := filePaths(m); !slices.Equal(got, want) {
		t.Errorf("files %v, want %v", got, want)
	}
	if m.Layout != model.LayoutHidden || m.Manifest != model.ManifestAbsent || m.Name != "torch-m3" {
		t.Errorf("layout %v, manifest %s, name %s", m.Layout, m.Manifest, m.Name)
	}
	if got := strings.Join(m.Graph.Inputs, ","); got != "input_ids,attention_mask" || !slices.Equal(m.Graph.External, []string{"model.onnx_data"}) {
		t.Errorf("inputs %s, external %v", got, m.Graph.External)
	}
	// The digest covers the weights: graph then external data, as `cat | sha256sum`.
	if sum := sha256Of(t, filepath.Join(dir, "onnx", "model.onnx"), filepath.Join(dir, "onnx", "model.onnx_data")); m.SHA256 != sum || m.ID != "torch-m3@"+sum[:12] {
		t.Errorf("sha256 %s, id %s; want %s", m.SHA256, m.ID, sum)
	}
	for _, f := range m.Files {
		if f.SHA256 != sha256Of(t, filepath.Join(dir, f.Path)) || f.Size == 0 {
			t.Errorf("%s: sha256 %s size %d", f.Path, f.SHA256, f.Size)
		}
	}
	if len(m.Sparse.W) != 32 || m.ColBERT.Dim != 32 || len(m.ColBERT.W) != 32*32 || len(m.ColBERT.B) != 32 {
		t.Errorf("heads: sparse %d weights, colbert dim %d with %d weights", len(m.Sparse.W), m.ColBERT.Dim, len(m.ColBERT.W))
	}
	if m.Config.MaxTokens != 8192 || m.Config.HiddenSize != 32 || m.Config.Layers != 2 {
		t.Errorf("config %+v", m.Config)
	}

	heads, err := model.Open(modeltest.TorchDir("torch-m3-heads"), model.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(heads.Graph.Inputs, ","); heads.Layout != model.LayoutHeads || got != "input_ids,attention_mask,token_type_ids,position_ids" {
		t.Errorf("three-head export: layout %v, inputs %s", heads.Layout, got)
	}
}

// TestOpenModelFile picks a variant graph of a snapshot.
func TestOpenModelFile(t *testing.T) {
	dir := modeltest.TorchDir("torch-m3")
	def, err := model.Open(dir, model.DefaultOptions())
	must(t, err)
	for _, file := range []string{"model_fp16.onnx", "onnx/model_fp16.onnx"} {
		m, err := model.Open(dir, model.Options{File: file})
		if err != nil {
			t.Fatal(err)
		}
		if m.ONNXPath != filepath.Join(dir, "onnx", "model_fp16.onnx") || !slices.Equal(m.Graph.External, []string{"model_fp16.onnx_data"}) {
			t.Errorf("--model-file %s: %s, external %v", file, m.ONNXPath, m.Graph.External)
		}
		if m.SHA256 == def.SHA256 {
			t.Errorf("--model-file %s: same digest as model.onnx", file)
		}
	}
	for _, tc := range []struct {
		file string
		err  error
		text string
	}{
		{"../torch-m3-heads/model.onnx", model.ErrInvalid, "inside the model directory"},
		{"/etc/passwd", model.ErrInvalid, "inside the model directory"},
		{"model_int8.onnx", model.ErrMissingFile, filepath.Join("onnx", "model_int8.onnx")},
	} {
		if _, err := model.Open(dir, model.Options{File: tc.file}); !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("--model-file %s: %v, want %v mentioning %q", tc.file, err, tc.err, tc.text)
		}
	}

	// Without onnx/model.onnx, the error lists the graphs there are.
	cp := copyDir(t, dir)
	must(t, os.Remove(filepath.Join(cp, "onnx", "model.onnx")))
	_, err = model.Open(cp, model.DefaultOptions())
	if !errors.Is(err, model.ErrMissingFile) || !strings.Contains(err.Error(), "onnx/model_fp16.onnx: choose one with --model-file") {
		t.Errorf("no model.onnx: %v", err)
	}
}

// TestOpenHFCache resolves repo ids in the Hugging Face cache layout
// (blobs, refs, snapshots of symlinks), offline.
func TestOpenHFCache(t *testing.T) {
	hub, commit := modeltest.HFCache(t, modeltest.TorchDir("torch-m3"), "BAAI/bge-m3")
	direct, err := model.Open(modeltest.TorchDir("torch-m3"), model.DefaultOptions())
	must(t, err)
	isolateHF(t)
	t.Setenv("HF_HUB_CACHE", hub)
	for _, ref := range []string{"BAAI/bge-m3", "BAAI/bge-m3@main", "BAAI/bge-m3@" + commit, filepath.Join(hub, "models--BAAI--bge-m3", "snapshots", commit)} {
		m, err := model.Open(ref, model.DefaultOptions())
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		if m.SHA256 != direct.SHA256 || m.ID != "bge-m3@"+direct.SHA256[:12] || m.Source.RepoID != "BAAI/bge-m3" || m.Source.Commit != commit {
			t.Errorf("%s: id %s, source %+v", ref, m.ID, m.Source)
		}
		if m.Dir != filepath.Join(hub, "models--BAAI--bge-m3", "snapshots", commit) {
			t.Errorf("%s: dir %s", ref, m.Dir)
		}
	}

	// HF_HOME/hub, as huggingface_hub uses it when HF_HUB_CACHE is unset.
	home := t.TempDir()
	must(t, os.Rename(hub, filepath.Join(home, "hub")))
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HF_HOME", home)
	if _, err := model.Open("BAAI/bge-m3", model.DefaultOptions()); err != nil {
		t.Errorf("HF_HOME: %v", err)
	}

	for _, tc := range []struct{ ref, text string }{
		{"BAAI/bge-m3@v9", "huggingface-cli download BAAI/bge-m3 --revision v9"},
		{"BAAI/bge-m2", "huggingface-cli download BAAI/bge-m2`"},
		{"BAAI/bge-m2", filepath.Join(home, "hub", "models--BAAI--bge-m2", "refs", "main")},
		{"BAAI/bge-m2", "jetembed never downloads"},
	} {
		_, err := model.Open(tc.ref, model.DefaultOptions())
		if !errors.Is(err, model.ErrNotDownloaded) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: %v, want ErrNotDownloaded mentioning %q", tc.ref, err, tc.text)
		}
	}
	// Hostile refs: a ref file naming a path, a revision climbing out.
	must(t, os.WriteFile(filepath.Join(home, "hub", "models--BAAI--bge-m3", "refs", "evil"), []byte("../../../../etc"), 0o644))
	for _, ref := range []string{"BAAI/bge-m3@evil", "BAAI/bge-m3@../../x", "../bge-m3"} {
		if _, err := model.Open(ref, model.DefaultOptions()); err == nil {
			t.Errorf("%s opened", ref)
		}
	}
}

// isolateHF keeps the machine's own Hugging Face caches out of a test.
func isolateHF(t *testing.T) {
	for _, v := range []string{"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"} {
		t.Setenv(v, "")
	}
	t.Setenv("HOME", t.TempDir())
}

// TestLockAndVerify: `model lock` writes the manifest that --verify then
// requires, and a changed weight file fails it.
func TestLockAndVerify(t *testing.T) {
	dir := copyDir(t, modeltest.TorchDir("torch-m3"))
	if _, err := model.Open(dir, model.Options{VerifyManifest: true}); !errors.Is(err, model.ErrMissingFile) || !strings.Contains(err.Error(), "manifest.json") {
		t.Fatalf("verify without a manifest: %v", err)
	}
	m, err := model.Open(dir, model.Options{File: "model_fp16.onnx"})
	must(t, err)
	path, err := model.Lock(m, "bge-m3")
	must(t, err)
	if path != filepath.Join(dir, "manifest.json") {
		t.Errorf("lock wrote %s", path)
	}
	v, err := model.Open(dir, model.Options{VerifyManifest: true})
	if err != nil {
		t.Fatal(err)
	}
	// The manifest remembers the graph it was locked for.
	if v.Manifest != model.ManifestVerified || v.ONNXPath != m.ONNXPath || v.ID != "bge-m3@"+m.SHA256[:12] {
		t.Errorf("verified: manifest %s, graph %s, id %s", v.Manifest, v.ONNXPath, v.ID)
	}
	data := filepath.Join(dir, "onnx", "model_fp16.onnx_data")
	b, err := os.ReadFile(data)
	must(t, err)
	b[len(b)/2] ^= 1
	must(t, os.WriteFile(data, b, 0o644))
	for _, opts := range []model.Options{{VerifyManifest: true}, model.DefaultOptions()} {
		if _, err := model.Open(dir, opts); !errors.Is(err, model.ErrChecksum) || !strings.Contains(err.Error(), "model_fp16.onnx_data") {
			t.Errorf("%+v: tampered external data: %v", opts, err)
		}
	}
	// --no-verify (the zero Options) loads it anyway, with another digest.
	if n, err := model.Open(dir, model.Options{}); err != nil || n.SHA256 == m.SHA256 || n.Manifest != model.ManifestSkipped {
		t.Errorf("no verify: %v", err)
	}
}

// graphProto is a ModelProto with the given interface: inputs and outputs
// (name -> ONNX element type, in order) and initializers (name ->
// external data location, "" for inline). Not runnable; ReadGraph only.
func graphProto(inputs, outputs [][2]any, inits [][2]string) []byte {
	vi := func(name string, elem int) []byte {
		var tt, typ, v []byte
		tt = protowire.AppendTag(tt, 1, protowire.VarintType)
		tt = protowire.AppendVarint(tt, uint64(elem))
		typ = protowire.AppendTag(typ, 1, protowire.BytesType)
		typ = protowire.AppendBytes(typ, tt)
		v = protowire.AppendTag(v, 1, protowire.BytesType)
		v = protowire.AppendString(v, name)
		v = protowire.AppendTag(v, 2, protowire.BytesType)
		return protowire.AppendBytes(v, typ)
	}
	var g []byte
	for _, in := range inits {
		var tp []byte
		tp = protowire.AppendTag(tp, 8, protowire.BytesType)
		tp = protowire.AppendString(tp, in[0])
		if in[1] != "" {
			var e []byte
			e = protowire.AppendTag(e, 1, protowire.BytesType)
			e = protowire.AppendString(e, "location")
			e = protowire.AppendTag(e, 2, protowire.BytesType)
			e = protowire.AppendString(e, in[1])
			tp = protowire.AppendTag(tp, 13, protowire.BytesType)
			tp = protowire.AppendBytes(tp, e)
			tp = protowire.AppendTag(tp, 14, protowire.VarintType)
			tp = protowire.AppendVarint(tp, 1)
		}
		g = protowire.AppendTag(g, 5, protowire.BytesType)
		g = protowire.AppendBytes(g, tp)
	}
	for _, in := range inputs {
		g = protowire.AppendTag(g, 11, protowire.BytesType)
		g = protowire.AppendBytes(g, vi(in[0].(string), in[1].(int)))
	}
	for _, out := range outputs {
		g = protowire.AppendTag(g, 12, protowire.BytesType)
		g = protowire.AppendBytes(g, vi(out[0].(string), out[1].(int)))
	}
	var m []byte
	m = protowire.AppendTag(m, 7, protowire.BytesType)
	return protowire.AppendBytes(m, g)
}

var (
	idsMask = [][2]any{{"input_ids", 7}, {"attention_mask", 7}}
	hidden  = [][2]any{{"last_hidden_state", 1}}
)

// TestOpenGraphInterfaces: what a graph may take and give, and external
// data that must stay inside the model directory.
func TestOpenGraphInterfaces(t *testing.T) {
	for _, tc := range []struct {
		name            string
		inputs, outputs [][2]any
		inits           [][2]string
		extra           map[string]string // more files
		err             error
		text            string
	}{
		{"int32 inputs and token types", [][2]any{{"input_ids", 6}, {"attention_mask", 6}, {"token_type_ids", 6}}, hidden, nil, nil, nil, ""},
		{"initializers listed as inputs (IR < 4)", append(append([][2]any{}, idsMask...), [2]any{"w", 1}), hidden, [][2]string{{"w", ""}}, nil, nil, ""},
		{"external data", idsMask, hidden, [][2]string{{"w", "weights.bin"}, {"v", "weights.bin"}}, map[string]string{"weights.bin": "x"}, nil, ""},
		{"an input jetembed cannot feed", append(append([][2]any{}, idsMask...), [2]any{"pixel_values", 1}), hidden, nil, nil, model.ErrLayout, `input "pixel_values"`},
		{"float ids", [][2]any{{"input_ids", 1}, {"attention_mask", 7}}, hidden, nil, nil, model.ErrLayout, "float32, want int64 or int32"},
		{"float16 output", idsMask, [][2]any{{"last_hidden_state", 10}}, nil, nil, model.ErrLayout, "keep_io_types"},
		{"missing external data", idsMask, hidden, [][2]string{{"w", "model.onnx_data"}}, nil, model.ErrMissingFile, "model.onnx_data (external data of model.onnx)"},
		{"external data outside the directory", idsMask, hidden, [][2]string{{"w", "../../etc/passwd"}}, nil, model.ErrInvalid, "outside the model directory"},
		{"absolute external data", idsMask, hidden, [][2]string{{"w", "/etc/passwd"}}, nil, model.ErrInvalid, "outside the model directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeDir(t, modeltest.Tiny)
			must(t, os.Remove(filepath.Join(dir, "manifest.json")))
			must(t, os.WriteFile(filepath.Join(dir, "model.onnx"), graphProto(tc.inputs, tc.outputs, tc.inits), 0o644))
			for n, c := range tc.extra {
				must(t, os.WriteFile(filepath.Join(dir, n), []byte(c), 0o644))
			}
			m, err := model.Open(dir, model.DefaultOptions())
			if tc.err == nil {
				if err != nil {
					t.Fatal(err)
				}
				if slices.Contains(m.Graph.Inputs, "w") {
					t.Errorf("inputs %v include the initializer", m.Graph.Inputs)
				}
				if len(tc.extra) > 0 && (len(m.Graph.External) != 1 || m.Files[1].Path != "weights.bin") {
					t.Errorf("external %v, files %v", m.Graph.External, filePaths(m))
				}
				return
			}
			if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("err %v, want %v mentioning %q", err, tc.err, tc.text)
			}
		})
	}
}

func TestPositionIDs(t *testing.T) {
	ids := []int64{0, 7, 8, 2, 1, 1, 0, 9, 2, 1, 1, 1}
	for _, tc := range []struct {
		modelType string
		want      []int64
	}{
		{"xlm-roberta", []int64{2, 3, 4, 5, 1, 1, 2, 3, 4, 1, 1, 1}},
		{"", []int64{2, 3, 4, 5, 1, 1, 2, 3, 4, 1, 1, 1}},
		{"bert", []int64{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}},
	} {
		got := make([]int64, len(ids))
		model.Config{ModelType: tc.modelType, PadID: 1}.PositionIDs(got, ids, 6)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q: %v, want %v", tc.modelType, got, tc.want)
		}
	}
}
