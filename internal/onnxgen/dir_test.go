package onnxgen

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func readDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
	}
	return files
}

func TestWriteDirReproducible(t *testing.T) {
	for _, c := range []Config{
		{Size: Tiny, Layout: LayoutHidden, Seed: 7},
		{Size: Tiny, Layout: LayoutHeads, Seed: 7},
		{Size: Tiny, Layout: LayoutHidden, Seed: 7, FP16: true},
	} {
		a, b := readDir(t, genDir(t, c)), readDir(t, genDir(t, c))
		if len(a) != len(b) {
			t.Fatalf("%+v: %d files vs %d", c, len(a), len(b))
		}
		for name, data := range a {
			if !bytes.Equal(data, b[name]) {
				t.Errorf("%s %v: %s differs between two runs", c.Layout, c.FP16, name)
			}
		}
	}
	c := Config{Size: Tiny, Layout: LayoutHidden, Seed: 7}
	a := readDir(t, genDir(t, c))
	c.Seed = 8
	b := readDir(t, genDir(t, c))
	if bytes.Equal(a["model.onnx"], b["model.onnx"]) {
		t.Error("seeds 7 and 8 gave the same model.onnx")
	}
}

func TestWriteDirContract(t *testing.T) {
	tok := fakeTokenizer(t, 1234)
	for _, tc := range []struct {
		layout Layout
		files  []string
	}{
		{LayoutHidden, []string{"colbert_linear.safetensors", "config.json", "manifest.json", "model.onnx", "sparse_linear.safetensors", "tokenizer.json"}},
		{LayoutHeads, []string{"config.json", "manifest.json", "model.onnx", "tokenizer.json"}},
	} {
		dir := t.TempDir()
		// A stale head file from an earlier hidden-layout run must go.
		if err := os.WriteFile(filepath.Join(dir, "sparse_linear.safetensors"), []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := WriteDir(dir, Config{Size: Tiny, Layout: tc.layout, Seed: 1}, tok); err != nil {
			t.Fatal(err)
		}
		files := readDir(t, dir)
		var names []string
		for n := range files {
			names = append(names, n)
		}
		if got, want := len(names), len(tc.files); got != want {
			t.Errorf("%s: files %v, want %v", tc.layout, names, tc.files)
		}
		for _, n := range tc.files {
			if _, ok := files[n]; !ok {
				t.Errorf("%s: missing %s", tc.layout, n)
			}
		}
		var man manifest
		if err := json.Unmarshal(files["manifest.json"], &man); err != nil {
			t.Fatal(err)
		}
		if man.Format != 1 || man.Name != "bge-m3" || man.Layout != tc.layout {
			t.Errorf("manifest header %+v", man)
		}
		if len(man.Files) != len(files)-1 {
			t.Errorf("manifest lists %d files, dir has %d besides the manifest", len(man.Files), len(files)-1)
		}
		for n, sum := range man.Files {
			if got := sha256Hex(files[n]); got != sum {
				t.Errorf("manifest sha256 of %s = %s, file is %s", n, sum, got)
			}
		}
		if !bytes.Equal(files["tokenizer.json"], tok) {
			t.Error("tokenizer.json is not a copy of the input")
		}
		var cfg hfConfig
		if err := json.Unmarshal(files["config.json"], &cfg); err != nil {
			t.Fatal(err)
		}
		want := hfConfig{ModelType: "xlm-roberta", HiddenSize: 32, NumHiddenLayers: 2, NumAttentionHeads: 4, IntermediateSize: 64,
			MaxPositionEmbeddings: 8194, VocabSize: 1234, PadTokenID: 1, BOSTokenID: 0, EOSTokenID: 2, LayerNormEps: 1e-5, TypeVocabSize: 1}
		if cfg != want {
			t.Errorf("config.json = %+v, want %+v", cfg, want)
		}
	}
}

func TestVocabSize(t *testing.T) {
	for _, tc := range []struct {
		name, json string
		want       int
		err        error
	}{
		{"unigram", `{"model":{"vocab":[["<s>",0],["<pad>",0],["<\/s>",0],["a",-1]]}}`, 4, nil},
		{"unigram with added mask", `{"added_tokens":[{"id":0},{"id":9}],"model":{"vocab":[["<s>",0],["<pad>",0],["a",-1]]}}`, 10, nil},
		{"wordpiece map", `{"model":{"vocab":{"[PAD]":0,"a":1,"b":41}}}`, 42, nil},
		{"no vocab", `{"model":{}}`, 0, ErrTokenizer},
		{"one token", `{"model":{"vocab":[["a",0]]}}`, 0, ErrTokenizer},
		{"not json", `{`, 0, ErrTokenizer},
	} {
		got, err := VocabSize([]byte(tc.json))
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("%s: VocabSize = %d, %v; want %d, %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}

func TestBuildRejects(t *testing.T) {
	for _, c := range []Config{
		{Size: Tiny, Layout: "both", VocabSize: 100},
		{Size: Size{Hidden: 30, Layers: 1, Heads: 4, Intermediate: 8, MaxPositions: 10}, Layout: LayoutHidden, VocabSize: 100},
		{Size: Tiny, Layout: LayoutHidden, VocabSize: 1},
		{Size: Size{}, Layout: LayoutHeads, VocabSize: 100},
	} {
		if _, err := Build(c); !errors.Is(err, ErrConfig) {
			t.Errorf("Build(%+v) = %v, want ErrConfig", c, err)
		}
	}
	if _, err := SizeByName("huge"); !errors.Is(err, ErrConfig) {
		t.Errorf("SizeByName(huge) = %v, want ErrConfig", err)
	}
}
