package onnxgen

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestCommittedModels checks that testdata/models/tiny-* are exactly what
// the generator writes today for the committed tokenizer, so they never
// silently drift from the code (see testdata/models/README.md).
func TestCommittedModels(t *testing.T) {
	root := filepath.Join("..", "..", "testdata")
	tok, err := os.ReadFile(filepath.Join(root, "tokenizers", "xlmr-unigram.json"))
	if err != nil {
		t.Skipf("tokenizer not present: %v", err)
	}
	for _, layout := range []Layout{LayoutHidden, LayoutHeads} {
		committed := filepath.Join(root, "models", "tiny-"+string(layout))
		dir := t.TempDir()
		if err := WriteDir(dir, Config{Size: Tiny, Layout: layout, Seed: 42}, tok); err != nil {
			t.Fatal(err)
		}
		want := readDir(t, dir)
		got := readDir(t, committed)
		for name, data := range want {
			if !bytes.Equal(got[name], data) {
				t.Errorf("%s/%s is stale or missing; regenerate as testdata/models/README.md says", committed, name)
			}
		}
		for name := range got {
			if _, ok := want[name]; !ok && name != "README.md" {
				t.Errorf("%s/%s is not written by the generator", committed, name)
			}
		}
	}
}
