package model_test

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jetembed/jetembed/engine/model/modeltest"
)

// TestTorchFixturesFresh regenerates the torch-made models with
// scripts/gen-torch-fixtures.py into a temporary directory and checks the
// committed files are what it writes, byte for byte, so the fixtures
// cannot drift from their generator. It needs Debian's python3-torch and
// python3-onnx (`make torch-fixtures` installs them) at the versions the
// committed reference records; otherwise, and with -short, it skips.
func TestTorchFixturesFresh(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: regenerating the torch fixtures takes ~20 s")
	}
	py := os.Getenv("PYTHON")
	if py == "" {
		py = "/usr/bin/python3"
	}
	ver, err := exec.Command(py, "-c", "import torch, onnx; print(torch.__version__, onnx.__version__)").Output()
	if err != nil {
		t.Skipf("%s has no torch and onnx (make torch-fixtures installs python3-torch, python3-onnx): %v", py, err)
	}
	root := filepath.Join("..", "..")
	b, err := os.ReadFile(filepath.Join(root, "testdata", "models", "torch-m3-reference.json"))
	must(t, err)
	var rec struct{ Torch, ONNX string }
	must(t, json.Unmarshal(b, &rec))
	if got := strings.TrimSpace(string(ver)); got != rec.Torch+" "+rec.ONNX {
		t.Skipf("torch, onnx %s here; the fixtures were made with %s %s: a different export is expected", got, rec.Torch, rec.ONNX)
	}
	out := t.TempDir()
	cmd := exec.Command(py, filepath.Join(root, "scripts", "gen-torch-fixtures.py"), out)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		t.Fatalf("gen-torch-fixtures.py: %v\n%s", err, log.String())
	}
	for _, dir := range []string{"testdata/models/torch-m3", "testdata/models/torch-m3-heads", "internal/torchpt/testdata"} {
		want, got := files(t, filepath.Join(root, dir)), files(t, filepath.Join(out, dir))
		if dir == "internal/torchpt/testdata" {
			delete(want, "legacy_f32.pt") // keyed by object ids: never the same twice
			delete(got, "legacy_f32.pt")
			for name := range want {
				if strings.HasPrefix(name, "fuzz/") {
					delete(want, name)
				}
			}
		}
		for name, w := range want {
			if g, ok := got[name]; !ok {
				t.Errorf("%s/%s is committed but the generator no longer writes it", dir, name)
			} else if !bytes.Equal(g, w) {
				t.Errorf("%s/%s is stale: regenerate with make torch-fixtures", dir, name)
			}
		}
		for name := range got {
			if _, ok := want[name]; !ok {
				t.Errorf("%s/%s is written by the generator but not committed", dir, name)
			}
		}
	}
	ref, err := os.ReadFile(filepath.Join(out, "testdata", "models", "torch-m3-reference.json"))
	must(t, err)
	if !bytes.Equal(ref, b) {
		t.Error("testdata/models/torch-m3-reference.json is stale: regenerate with make torch-fixtures")
	}
	if len(modeltest.TorchReference(t)) < 30 {
		t.Error("the reference corpus shrank below 30 texts")
	}
}

// files reads every file under dir, by slash path relative to it.
func files(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	must(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		b, err := os.ReadFile(path)
		out[filepath.ToSlash(rel)] = b
		return err
	}))
	return out
}
