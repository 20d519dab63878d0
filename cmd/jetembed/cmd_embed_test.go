package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jetembed/jetembed/schema"
)

func tinyModel(tb testing.TB, name string) string {
	tb.Helper()
	if p := os.Getenv("JETEMBED_ORT_LIB"); p == "" {
		tb.Skip("JETEMBED_ORT_LIB not set; run `make test` or `make deps`")
	}
	return filepath.Join("..", "..", "testdata", "models", name)
}

func run(t *testing.T, stdin string, args ...string) (code int, out, errOut string) {
	t.Helper()
	var o, e bytes.Buffer
	code = runMain(context.Background(), args, stdio{in: strings.NewReader(stdin), out: &o, err: &e})
	return code, o.String(), e.String()
}

func decodeItems(t *testing.T, out string) []schema.Item {
	t.Helper()
	var items []schema.Item
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var it schema.Item
		if err := json.Unmarshal([]byte(line), &it); err != nil {
			t.Fatalf("output line %q: %v", line, err)
		}
		items = append(items, it)
	}
	return items
}

func norm(v []float32) float64 {
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	return math.Sqrt(ss)
}

func TestEmbedCommand(t *testing.T) {
	dir := tinyModel(t, "tiny-hidden")
	long := strings.Repeat("lorem ipsum dolor sit amet ", 20)
	in := strings.Join([]string{
		`{"text":"the quick brown fox"}`,
		`{"text":"jumps over the lazy dog again and again"}`,
		`not json`,
		`{"text":"the quick brown fox"}`,
		`{"other":1}`,
		`{"text":` + strconvQuote(long) + `}`,
	}, "\n") + "\n"
	code, out, errOut := run(t, in, "embed", "--model", dir, "--outputs", "dense,sparse,colbert", "--batch", "2", "--max-tokens", "32", "--threads", "1")
	if code != 1 || !strings.Contains(errOut, "2 of 6 lines failed") {
		t.Fatalf("exit %d, want 1 with a summary: %s", code, errOut)
	}
	checkOutputLines(t, out, []string{"1", "2", "3", "4", "5", "6"})
	items := decodeItems(t, out)
	if len(items) != 6 {
		t.Fatalf("%d result lines for 6 input lines", len(items))
	}
	for _, i := range []int{2, 4} {
		if items[i].Error == nil || items[i].Error.Code != schema.CodeBadPayload {
			t.Errorf("line %d: error %v, want bad_payload", i, items[i].Error)
		}
	}
	for _, i := range []int{0, 1, 3, 5} {
		it := items[i]
		if it.Error != nil {
			t.Fatalf("line %d: %v", i, it.Error)
		}
		if len(it.Dense) != 32 || math.Abs(norm(it.Dense)-1) > 1e-5 {
			t.Errorf("line %d: dense of %d values, norm %g", i, len(it.Dense), norm(it.Dense))
		}
		if it.Sparse == nil || !slices.IsSorted(it.Sparse.IDs) || len(it.Sparse.IDs) != len(it.Sparse.Weights) {
			t.Errorf("line %d: sparse %+v", i, it.Sparse)
		}
		rows := min(it.Tokens, 32) - 1
		if len(it.ColBERT) != rows {
			t.Errorf("line %d: %d colbert rows for %d tokens", i, len(it.ColBERT), it.Tokens)
		}
	}
	// Same text, same result, wherever it sat in the input and its batches.
	if !slices.Equal(items[0].Dense, items[3].Dense) || slices.Equal(items[0].Dense, items[1].Dense) {
		t.Error("results are not in input order")
	}
	if !items[5].Truncated || items[5].Tokens <= 32 {
		t.Errorf("long text: truncated %v tokens %d, want truncated over 32", items[5].Truncated, items[5].Tokens)
	}

	code, out, errOut = run(t, `{"text":`+strconvQuote(long)+`}`+"\n", "embed", "--model", dir, "--max-tokens", "32", "--no-truncate")
	if code != 1 || !strings.Contains(errOut, "1 of 1 lines failed") {
		t.Fatalf("--no-truncate: exit %d: %s", code, errOut)
	}
	if it := decodeItems(t, out)[0]; it.Error == nil || it.Error.Code != schema.CodeTextTooLong || it.Dense != nil {
		t.Errorf("--no-truncate: %+v, want text_too_long and no vector", it)
	}
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestEmbedCommandUsage(t *testing.T) {
	dir := tinyModel(t, "tiny-heads")
	for _, args := range [][]string{
		{"embed"},
		{"embed", "--model", dir, "--outputs", "dense,bogus"},
		{"embed", "--model", dir, "--provider", "quantum"},
		{"embed", "--model", dir, "--tiers", "8,x"},
		{"embed", "--model", dir, "in.jsonl", "extra"},
	} {
		if code, _, _ := run(t, "", args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if code, _, errOut := run(t, "", "embed", "--model", filepath.Join(t.TempDir(), "none")); code != 1 || !strings.Contains(errOut, "model") {
		t.Errorf("missing model directory: exit %d, %q", code, errOut)
	}
	// Empty input is not an error: no lines, no output.
	if code, out, errOut := run(t, "", "embed", "--model", dir); code != 0 || out != "" {
		t.Errorf("empty input: exit %d out %q err %q", code, out, errOut)
	}
}

func TestWarmupCommand(t *testing.T) {
	dir := tinyModel(t, "tiny-heads")
	// On CPU the grid is opt-in.
	code, out, errOut := run(t, "", "warmup", "--model", dir, "--warmup-batches", "1,2", "--warmup-seqs", "8,64", "--probe=false", "--sessions", "2", "--threads", "1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"2 sessions warmed", "ceiling 64 tokens", "1x8 2x8", "1x64 2x64"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// Without --warmup-seqs the grid is every tier the packer pads to.
	code, out, errOut = run(t, "", "warmup", "--model", dir, "--max-tokens", "64", "--warmup-batches", "1,3", "--probe=false", "--threads", "1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if want := "ceiling 64 tokens; 16 shapes: 1x8 3x8 1x16 3x16 1x24 3x24 1x32 3x32 1x40 3x40 1x48 3x48 1x56 3x56 1x64 3x64\n"; !strings.Contains(out, want) {
		t.Errorf("default grid: output lacks %q:\n%s", want, out)
	}
}

// TestEmbedCommandBatchInvariance embeds the same lines one at a time and
// all together over two sessions. With the graph's attention, padding,
// packing and the concurrent batches must not change a single byte of the
// output, in float32 and in int8 (whose activations are quantized per
// token row). The fused form's flash kernel blocks the keys by the chunk's
// padded length, so the last bits may move with the chunk shape: there
// the vectors must agree within 1e-5.
func TestEmbedCommandBatchInvariance(t *testing.T) {
	dir := tinyModel(t, "tiny-hidden")
	var in strings.Builder
	for i := 0; i < 40; i++ {
		in.WriteString(`{"text":` + strconvQuote(strings.Repeat("word"+strings.Repeat("x", i%4)+" ", 1+i*i%90)) + "}\n")
	}
	for _, tc := range []struct{ attention, precision string }{{"graph", "fp32"}, {"fused", "fp32"}, {"graph", "int8"}, {"fused", "int8"}} {
		var outs []string
		for _, batch := range []string{"1", "40"} {
			code, out, errOut := run(t, in.String(), "embed", "--model", dir, "--outputs", "dense,sparse,colbert", "--batch", batch, "--sessions", "2", "--threads", "1", "--attention", tc.attention, "--precision", tc.precision)
			if code != 0 {
				t.Fatalf("%+v --batch %s: exit %d: %s", tc, batch, code, errOut)
			}
			for _, want := range []string{"attention " + tc.attention, "precision " + tc.precision + " (--precision " + tc.precision} {
				if !strings.Contains(errOut, want) {
					t.Errorf("%+v: stderr lacks %q:\n%s", tc, want, errOut)
				}
			}
			outs = append(outs, out)
		}
		one, all := decodeItems(t, outs[0]), decodeItems(t, outs[1])
		if len(one) != 40 || len(all) != 40 {
			t.Fatalf("%+v: %d and %d items", tc, len(one), len(all))
		}
		if tc.attention == "graph" {
			if outs[0] != outs[1] {
				t.Errorf("%+v: output differs between --batch 1 and --batch 40", tc)
			}
			continue
		}
		for i := range one {
			if d := itemDiff(one[i], all[i]); d > 1e-5 {
				t.Errorf("%+v: item %d differs by %g between --batch 1 and --batch 40", tc, i, d)
			}
		}
	}
}

// itemDiff is the largest difference between two items' vectors; a sparse
// id only one of them has counts with its weight.
func itemDiff(a, b schema.Item) float64 {
	d := 0.0
	vec := func(x, y []float32) {
		if len(x) != len(y) {
			d = math.Inf(1)
			return
		}
		for i := range x {
			d = math.Max(d, math.Abs(float64(x[i]-y[i])))
		}
	}
	vec(a.Dense, b.Dense)
	if len(a.ColBERT) != len(b.ColBERT) {
		return math.Inf(1)
	}
	for i := range a.ColBERT {
		vec(a.ColBERT[i], b.ColBERT[i])
	}
	weights := func(s *schema.Sparse) map[uint32]float32 {
		m := map[uint32]float32{}
		if s != nil {
			for i, id := range s.IDs {
				m[id] = s.Weights[i]
			}
		}
		return m
	}
	wa, wb := weights(a.Sparse), weights(b.Sparse)
	for id, w := range wa {
		d = math.Max(d, math.Abs(float64(w-wb[id])))
	}
	for id, w := range wb {
		d = math.Max(d, math.Abs(float64(w-wa[id])))
	}
	return d
}
