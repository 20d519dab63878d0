package modeltest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TorchDir is the directory of a committed torch-made model (see
// testdata/models/README.md): "torch-m3" (a BAAI/bge-m3 snapshot, the
// hidden-state graph in onnx/ with external data, heads in .pt files) or
// "torch-m3-heads" (a three-head export taking token_type_ids and
// position_ids).
func TorchDir(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "testdata", "models", name)
}

// TorchItem is one text of the torch reference: its HF tokenizers ids and
// the float64 vectors BGEM3FlagModel.encode gives it.
type TorchItem struct {
	Text   string  `json:"text"`
	IDs    []int32 `json:"ids"`
	Dense  []float64
	Sparse struct {
		IDs     []uint32  `json:"ids"`
		Weights []float64 `json:"weights"`
	}
	ColBERT [][]float64
}

// TorchReference reads testdata/models/torch-m3-reference.json.
func TorchReference(tb testing.TB) []TorchItem {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(TorchDir(""), "torch-m3-reference.json"))
	if err != nil {
		tb.Fatal(err)
	}
	var ref struct{ Items []TorchItem }
	if err := json.Unmarshal(b, &ref); err != nil {
		tb.Fatal(err)
	}
	if len(ref.Items) == 0 {
		tb.Fatal("torch reference without items")
	}
	return ref.Items
}

// Check compares vectors with the reference: the same sparse ids, and
// every value within tol. colbert is rows x dim, row-major. It returns the
// largest difference.
func (it TorchItem) Check(dense []float32, sparseIDs []uint32, sparseWeights []float32, colbert []float32, dim int, tol float64) (float64, error) {
	worst, err := it.check(dense, sparseIDs, sparseWeights, colbert, dim, tol)
	return worst, err
}

func (it TorchItem) check(dense []float32, sparseIDs []uint32, sparseWeights []float32, colbert []float32, dim int, tol float64) (worst float64, err error) {
	cmp := func(what string, got []float32, want []float64) error {
		if len(got) != len(want) {
			return fmt.Errorf("%s: %d values, want %d", what, len(got), len(want))
		}
		for i := range got {
			worst = max(worst, math.Abs(float64(got[i])-want[i]))
		}
		return nil
	}
	if err := cmp("dense", dense, it.Dense); err != nil {
		return worst, err
	}
	if fmt.Sprint(sparseIDs) != fmt.Sprint(it.Sparse.IDs) {
		return worst, fmt.Errorf("sparse ids %v, want %v", sparseIDs, it.Sparse.IDs)
	}
	if err := cmp("sparse", sparseWeights, it.Sparse.Weights); err != nil {
		return worst, err
	}
	if dim > 0 && len(colbert)/dim != len(it.ColBERT) {
		return worst, fmt.Errorf("colbert: %d rows, want %d", len(colbert)/max(dim, 1), len(it.ColBERT))
	}
	var flat []float64
	for _, r := range it.ColBERT {
		flat = append(flat, r...)
	}
	if err := cmp("colbert", colbert, flat); err != nil {
		return worst, err
	}
	if worst > tol {
		return worst, fmt.Errorf("differs from torch by %.3g (tolerance %g)", worst, tol)
	}
	return worst, nil
}

// HFCache lays the model directory src out as the Hugging Face hub cache
// does after `huggingface-cli download repoID`: under a new hub directory,
// models--org--name/blobs/<sha256> holding the files, refs/main naming the
// commit, and snapshots/<commit>/ of relative symlinks into blobs. It
// returns the hub directory (for HF_HUB_CACHE) and the commit.
func HFCache(tb testing.TB, src, repoID string) (hub, commit string) {
	tb.Helper()
	hub = tb.TempDir()
	org, name, ok := strings.Cut(repoID, "/")
	if !ok {
		tb.Fatalf("repo id %q is not org/name", repoID)
	}
	repo := filepath.Join(hub, "models--"+org+"--"+name)
	sum := sha256.Sum256([]byte(repoID))
	commit = hex.EncodeToString(sum[:20])
	snap := filepath.Join(repo, "snapshots", commit)
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		h := sha256.Sum256(b)
		blob := filepath.Join(repo, "blobs", hex.EncodeToString(h[:]))
		if err := os.MkdirAll(filepath.Dir(blob), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(blob, b, 0o644); err != nil {
			return err
		}
		link := filepath.Join(snap, rel)
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			return err
		}
		target, err := filepath.Rel(filepath.Dir(link), blob)
		if err != nil {
			return err
		}
		return os.Symlink(target, link)
	})
	if err == nil {
		err = os.MkdirAll(filepath.Join(repo, "refs"), 0o755)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(commit), 0o644)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return hub, commit
}
