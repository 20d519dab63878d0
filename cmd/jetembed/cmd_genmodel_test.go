package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGenmodelCommand writes both tiny layouts through the command and
// checks them against the committed test models byte for byte (so the
// command and testdata/models/README.md agree), then embeds with the fresh
// directory as is: genmodel's output is a complete model directory.
func TestGenmodelCommand(t *testing.T) {
	tok, err := filepath.Abs(filepath.Join("..", "..", defaultTokenizer))
	if err != nil {
		t.Fatal(err)
	}
	for _, layout := range []string{"hidden", "heads"} {
		t.Run(layout, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "m")
			code, stdout, errOut := run(t, "", "genmodel", "--size", "tiny", "--layout", layout, "--seed", "42", "--tokenizer", tok, "--out", out)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if !strings.Contains(stdout, "wrote "+out) || !strings.Contains(stdout, layout+" layout") {
				t.Errorf("stdout %q", stdout)
			}
			committed := filepath.Join("..", "..", "testdata", "models", "tiny-"+layout)
			files, err := os.ReadDir(out)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]bool{"model.onnx": true, "tokenizer.json": true, "config.json": true, "manifest.json": true}
			if layout == "hidden" {
				want["sparse_linear.safetensors"], want["colbert_linear.safetensors"] = true, true
			}
			for _, f := range files {
				if !want[f.Name()] {
					t.Errorf("unexpected file %s", f.Name())
				}
				delete(want, f.Name())
				got, _ := os.ReadFile(filepath.Join(out, f.Name()))
				ref, err := os.ReadFile(filepath.Join(committed, f.Name()))
				if err != nil || !bytes.Equal(got, ref) {
					t.Errorf("%s differs from %s (%v)", f.Name(), committed, err)
				}
			}
			for name := range want {
				t.Errorf("%s not written", name)
			}

			tinyModel(t, "tiny-"+layout) // skips without ONNX Runtime
			code, stdout, errOut = run(t, `{"text":"hello world"}`+"\n", "embed", "--model", out, "--outputs", "dense,sparse,colbert", "--threads", "1")
			if code != 0 {
				t.Fatalf("embed with the generated directory: exit %d: %s", code, errOut)
			}
			items := decodeItems(t, stdout)
			if len(items) != 1 || items[0].Error != nil || len(items[0].Dense) != 32 || len(items[0].ColBERT) == 0 {
				t.Fatalf("embed output %s", stdout)
			}
		})
	}
}

func TestGenmodelCommandUsage(t *testing.T) {
	out := filepath.Join(t.TempDir(), "m")
	for _, args := range [][]string{
		{"genmodel"},
		{"genmodel", "--out", out, "--size", "huge"},
		{"genmodel", "--out", out, "--layout", "both"},
		{"genmodel", "--out", out, "--seed", "-1"},
		{"genmodel", "--out", out, "--layers", "-1"},
		{"genmodel", "--out", out, "--layers", "49"},
		{"genmodel", "--out", out, "extra"},
	} {
		if code, _, errOut := run(t, "", args...); code != 2 {
			t.Errorf("%q: exit %d, want 2 (usage): %s", args, code, errOut)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a refused command wrote %s", out)
	}
	if code, _, errOut := run(t, "", "genmodel", "--out", out, "--tokenizer", filepath.Join(t.TempDir(), "none.json")); code != 1 || !strings.Contains(errOut, "none.json") {
		t.Errorf("missing tokenizer: exit %d: %s", code, errOut)
	}
}

// TestGenmodelFindsTokenizer: without --tokenizer, genmodel finds the
// repository's tokenizer from a directory other than the root.
func TestGenmodelFindsTokenizer(t *testing.T) {
	out := filepath.Join(t.TempDir(), "m")
	t.Chdir(filepath.Join("..", "..", "engine"))
	if code, _, errOut := run(t, "", "genmodel", "--out", out); code != 0 {
		t.Fatalf("genmodel from engine/: exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(out, "tokenizer.json")); err != nil {
		t.Error(err)
	}
}

// TestGenmodelLayers: --layers sets the encoder's depth and keeps the
// size's width (m3 with one layer is BGE-M3's layer shape).
func TestGenmodelLayers(t *testing.T) {
	for _, c := range []struct {
		size, layers string
		want         []string
	}{
		{"tiny", "3", []string{`"hidden_size": 32,`, `"num_hidden_layers": 3,`}},
		{"m3", "1", []string{`"hidden_size": 1024,`, `"num_hidden_layers": 1,`, `"num_attention_heads": 16,`, `"intermediate_size": 4096,`}},
	} {
		out := filepath.Join(t.TempDir(), "m")
		code, stdout, errOut := run(t, "", "genmodel", "--size", c.size, "--layers", c.layers, "--out", out)
		if code != 0 {
			t.Fatalf("--size %s --layers %s: exit %d: %s", c.size, c.layers, code, errOut)
		}
		if !strings.Contains(stdout, c.layers+" layers") {
			t.Errorf("stdout %q", stdout)
		}
		cfg, err := os.ReadFile(filepath.Join(out, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range c.want {
			if !strings.Contains(string(cfg), w) {
				t.Errorf("--size %s --layers %s: config.json has no %s:\n%s", c.size, c.layers, w, cfg)
			}
		}
	}
}
