package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/engine/model/modeltest"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/schema"
)

// checkTorch compares result items with the torch reference.
func checkTorch(t *testing.T, items []schema.Item, ref []modeltest.TorchItem) {
	t.Helper()
	if len(items) != len(ref) {
		t.Fatalf("%d items for %d texts", len(items), len(ref))
	}
	for i, it := range ref {
		g := items[i]
		if g.Error != nil || g.Sparse == nil {
			t.Fatalf("text %d %q: error %v, sparse %v", i, it.Text, g.Error, g.Sparse)
		}
		var colbert []float32
		for _, row := range g.ColBERT {
			colbert = append(colbert, row...)
		}
		dim := 0
		if len(g.ColBERT) > 0 {
			dim = len(g.ColBERT[0])
		}
		if _, err := it.Check(g.Dense, g.Sparse.IDs, g.Sparse.Weights, colbert, dim, 1e-4); err != nil {
			t.Errorf("text %d %q: %v", i, it.Text, err)
		}
	}
}

// TestServeRepoIDFromHFCache is the "done when": what
// `huggingface-cli download BAAI/bge-m3` leaves in the cache (blobs, refs,
// snapshots of symlinks, the ONNX export in onnx/ with external data, the
// heads as .pt files), then `jetembed serve --model BAAI/bge-m3` with
// nothing in between: no conversion, no manifest. Its answers over NATS
// equal torch's float64 vectors within 1e-4 on the mixed corpus.
func TestServeRepoIDFromHFCache(t *testing.T) {
	tinyModel(t, "tiny-hidden") // skips without ONNX Runtime
	hub, commit := modeltest.HFCache(t, modeltest.TorchDir("torch-m3"), "BAAI/bge-m3")
	t.Setenv("HF_HUB_CACHE", hub)
	t.Setenv("HUGGINGFACE_HUB_CACHE", "")
	srv := natstest.RunServer(t)
	s := startServe(t, srv.ClientURL(), "--model", "BAAI/bge-m3")
	id := s.logField(t, "ready", "model")
	if !strings.HasPrefix(id, "bge-m3@") {
		t.Errorf("model id %q, want bge-m3@<digest>", id)
	}
	if logs := s.log.String(); !strings.Contains(logs, "(BAAI/bge-m3@main, snapshot "+commit+")") ||
		!strings.Contains(logs, "manifest absent") || !strings.Contains(logs, "onnx/model.onnx_data ") {
		t.Errorf("serve did not report the model's source and digests:\n%s", logs)
	}

	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ref := modeltest.TorchReference(t)
	var texts []string
	for _, it := range ref {
		texts = append(texts, it.Text)
	}
	job := schema.NewJob("torch", texts...)
	job.Outputs = []schema.Output{schema.OutputDense, schema.OutputSparse, schema.OutputColBERT}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.Request(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	if res.Error != nil || res.Model != id {
		t.Fatalf("result error %v, model %q (ready said %q)", res.Error, res.Model, id)
	}
	checkTorch(t, res.Items, ref)
}

// TestEmbedRealLayouts runs `jetembed embed` on the snapshot directory and
// on the three-head export whose graph takes token_type_ids and
// position_ids, and shows the errors of a model that is not there.
func TestEmbedRealLayouts(t *testing.T) {
	tinyModel(t, "tiny-hidden")
	ref := modeltest.TorchReference(t)
	var in strings.Builder
	for _, it := range ref {
		b, _ := json.Marshal(map[string]string{"text": it.Text})
		in.Write(append(b, '\n'))
	}
	for _, dir := range []string{modeltest.TorchDir("torch-m3"), modeltest.TorchDir("torch-m3-heads")} {
		code, out, errOut := run(t, in.String(), "embed", "--model", dir, "--outputs", "dense,sparse,colbert", "--threads", "1")
		if code != 0 {
			t.Fatalf("embed --model %s: exit %d: %s", dir, code, errOut)
		}
		checkTorch(t, decodeItems(t, out), ref)
	}

	for _, v := range []string{"HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"} {
		t.Setenv(v, "")
	}
	t.Setenv("HOME", t.TempDir())
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	code, _, errOut := run(t, "", "embed", "--model", "BAAI/bge-m3")
	if code != 1 || !strings.Contains(errOut, "model: not downloaded: BAAI/bge-m3") ||
		!strings.Contains(errOut, "huggingface-cli download BAAI/bge-m3") || !strings.Contains(errOut, "models--BAAI--bge-m3") {
		t.Errorf("not downloaded: exit %d: %s", code, errOut)
	}
	code, _, errOut = run(t, "", "embed", "--model", modeltest.TorchDir("torch-m3"), "--verify", "--no-verify")
	if code != 2 || !strings.Contains(errOut, "contradict") {
		t.Errorf("--verify --no-verify: exit %d: %s", code, errOut)
	}
}

// TestModelInspectAndLock: inspect shows what would be loaded; lock
// writes the manifest --verify then requires.
func TestModelInspectAndLock(t *testing.T) {
	src := modeltest.TorchDir("torch-m3")
	code, out, errOut := run(t, "", "model", "inspect", src)
	if code != 0 {
		t.Fatalf("inspect: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"torch-m3@", "layout", "hidden", "input_ids int64, attention_mask int64", "last_hidden_state float32",
		"max tokens", "8192", "sparse Linear(32, 1) from sparse_linear.pt", "colbert Linear(32, 32) from colbert_linear.pt",
		"onnx/model.onnx_data", "manifest", "absent", "onnx/model_fp16.onnx (choose with --model-file)"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect lacks %q:\n%s", want, out)
		}
	}
	code, out, errOut = run(t, "", "model", "inspect", "--json", modeltest.TorchDir("torch-m3-heads"))
	var rep modelReport
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
		t.Fatalf("inspect --json: exit %d: %s %s", code, out, errOut)
	}
	if rep.Layout != "heads" || strings.Join(rep.Order, ",") != "input_ids,attention_mask,token_type_ids,position_ids" || rep.Max != 8192 || len(rep.Files) != 4 {
		t.Errorf("inspect --json: %+v", rep)
	}

	dir := filepath.Join(t.TempDir(), "bge-m3")
	if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = run(t, "", "model", "lock", "--name", "m3", dir)
	if code != 0 || !strings.Contains(out, filepath.Join(dir, "manifest.json")) || !strings.Contains(out, "model id m3@") {
		t.Fatalf("lock: exit %d: %s %s", code, out, errOut)
	}
	code, out, _ = run(t, "", "model", "inspect", dir)
	if code != 0 || !strings.Contains(out, "m3@") || !strings.Contains(out, "checked") {
		t.Errorf("inspect after lock: exit %d: %s", code, out)
	}
	for _, args := range [][]string{{"model"}, {"model", "unlock", dir}, {"model", "inspect"}, {"model", "inspect", dir, dir}} {
		if code, _, errOut := run(t, "", args...); code != 2 {
			t.Errorf("%q: exit %d, want 2: %s", args, code, errOut)
		}
	}
	tinyModel(t, "tiny-hidden") // the rest runs ONNX Runtime
	code, _, errOut = run(t, `{"text":"hello"}`+"\n", "embed", "--model", dir, "--verify", "--threads", "1")
	if code != 0 || !strings.Contains(errOut, "model m3@") || !strings.Contains(errOut, "manifest verified") {
		t.Errorf("embed --verify after lock: exit %d: %s", code, errOut)
	}
	// A weight file changed after the lock fails even without --verify.
	data := filepath.Join(dir, "onnx", "model.onnx_data")
	b, _ := os.ReadFile(data)
	b[100] ^= 0x40
	if err := os.WriteFile(data, b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = run(t, `{"text":"hello"}`+"\n", "embed", "--model", dir, "--threads", "1")
	if code != 1 || !strings.Contains(errOut, "model: checksum mismatch") || !strings.Contains(errOut, "model.onnx_data") {
		t.Errorf("tampered weights: exit %d: %s", code, errOut)
	}
}
