//go:build cgo

package onnxgen

import (
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jetembed/jetembed/internal/safetensors"
)

// textIDs is a fake tokenized text: <s>, n-2 ids drawn from a small LCG
// over [4, vocab), </s>.
func textIDs(n, vocab int, seed uint64) []int64 {
	ids := []int64{0}
	for len(ids) < n-1 {
		seed = seed*6364136223846793005 + 1442695040888963407
		ids = append(ids, 4+int64(seed>>33)%int64(vocab-4))
	}
	return append(ids, 2)
}

func maxAbsDiff(a, b []float32) float64 {
	var m float64
	for i := range a {
		m = max(m, math.Abs(float64(a[i]-b[i])))
	}
	return m
}

func checkFinite(t *testing.T, what string, v []float32) {
	t.Helper()
	for i, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			t.Fatalf("%s[%d] = %g", what, i, x)
		}
	}
}

func TestDynamicShapes(t *testing.T) {
	const vocab = 8002
	for _, layout := range []Layout{LayoutHidden, LayoutHeads} {
		dir := genDir(t, Config{Size: Tiny, Layout: layout, Seed: 1})
		s := openSession(t, filepath.Join(dir, "model.onnx"), layout, 1)
		for _, shape := range [][2]int{{1, 2}, {1, 17}, {3, 5}, {8, 64}, {2, 300}} {
			b, n := shape[0], shape[1]
			rows := make([][]int64, b)
			for i := range rows {
				rows[i] = textIDs(n-i%2, vocab, uint64(i)) // some rows padded
			}
			res := s.run(t, rows)
			var want [][]int64
			if layout == LayoutHidden {
				want = [][]int64{{int64(b), int64(n), 32}}
			} else {
				want = [][]int64{{int64(b), 32}, {int64(b), int64(n), 1}, {int64(b), int64(n - 1), 32}}
			}
			for i, r := range res {
				if !equalShape(r.shape, want[i]) {
					t.Errorf("%s %dx%d: %s shape %v, want %v", layout, b, n, s.outputs[i], r.shape, want[i])
				}
				checkFinite(t, s.outputs[i], r.data)
			}
		}
	}
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestPaddingInvariance runs a text alone and right-padded in a batch with a
// longer text: its real positions must not change.
func TestPaddingInvariance(t *testing.T) {
	short, long := textIDs(9, 8002, 1), textIDs(40, 8002, 2)
	n, seq, h := len(short), len(long), 32
	for _, layout := range []Layout{LayoutHidden, LayoutHeads} {
		dir := genDir(t, Config{Size: Tiny, Layout: layout, Seed: 1})
		s := openSession(t, filepath.Join(dir, "model.onnx"), layout, 1)
		alone := s.run(t, [][]int64{short})
		batch := s.run(t, [][]int64{long, short})
		var diff float64
		if layout == LayoutHidden {
			diff = maxAbsDiff(alone[0].data, batch[0].data[seq*h:seq*h+n*h])
		} else {
			diff = max(
				maxAbsDiff(alone[0].data, batch[0].data[h:2*h]),
				maxAbsDiff(alone[1].data, batch[1].data[seq:seq+n]),
				maxAbsDiff(alone[2].data, batch[2].data[(seq-1)*h:(seq-1)*h+(n-1)*h]),
			)
			// Padding rows of colbert_vecs are zeroed by the mask.
			for _, v := range batch[2].data[(seq-1)*h+(n-1)*h:] {
				if v != 0 {
					t.Fatalf("%s: colbert row of padding is not zero: %g", layout, v)
				}
			}
		}
		t.Logf("%s: max |diff| alone vs padded = %g", layout, diff)
		if diff > 1e-5 {
			t.Errorf("%s: padding changed the output: max |diff| = %g", layout, diff)
		}
	}
}

// TestHeadsMatchHidden checks the three-head graph against the hidden-state
// graph of the same seed with BGE-M3's heads applied here, from the
// safetensors the hidden layout ships.
func TestHeadsMatchHidden(t *testing.T) {
	hidDir := genDir(t, Config{Size: Tiny, Layout: LayoutHidden, Seed: 5})
	headDir := genDir(t, Config{Size: Tiny, Layout: LayoutHeads, Seed: 5})
	hid := openSession(t, filepath.Join(hidDir, "model.onnx"), LayoutHidden, 1)
	heads := openSession(t, filepath.Join(headDir, "model.onnx"), LayoutHeads, 1)
	sp, err := safetensors.ReadFile(filepath.Join(hidDir, "sparse_linear.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	cb, err := safetensors.ReadFile(filepath.Join(hidDir, "colbert_linear.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	rows := [][]int64{textIDs(30, 8002, 3), textIDs(12, 8002, 4), textIDs(2, 8002, 5)}
	lens := []int{30, 12, 2}
	const h, seq = 32, 30
	hs := hid.run(t, rows)[0].data
	got := heads.run(t, rows)
	var positive, zero int
	var diff float64
	for b, n := range lens {
		base := b * seq * h
		dense := normalize(append([]float32(nil), hs[base:base+h]...))
		diff = max(diff, maxAbsDiff(dense, got[0].data[b*h:(b+1)*h]))
		for p := range seq {
			x := hs[base+p*h : base+(p+1)*h]
			sparse := max(0, dot(x, sp["weight"].Data)+sp["bias"].Data[0])
			diff = max(diff, math.Abs(float64(sparse-got[1].data[b*seq+p])))
			if p < n {
				if sparse > 0 {
					positive++
				} else {
					zero++
				}
			}
			if p == 0 {
				continue
			}
			col := make([]float32, h)
			if p < n { // masked positions stay zero
				for c := range h {
					col[c] = dot(x, cb["weight"].Data[c*h:(c+1)*h]) + cb["bias"].Data[c]
				}
			}
			off := (b*(seq-1) + p - 1) * h
			diff = max(diff, maxAbsDiff(normalize(col), got[2].data[off:off+h]))
		}
	}
	t.Logf("max |diff| heads graph vs hidden + Go heads = %g; sparse: %d positive, %d zero", diff, positive, zero)
	if diff > 1e-5 {
		t.Errorf("heads layout differs from hidden layout + heads: max |diff| = %g", diff)
	}
	if positive == 0 || zero == 0 {
		t.Errorf("sparse head: %d positive and %d zero weights; want some of each so relu matters", positive, zero)
	}
}

func dot(a, b []float32) float32 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return float32(s)
}

// normalize is torch.nn.functional.normalize: x / max(||x||, 1e-12).
func normalize(x []float32) []float32 {
	n := float32(math.Sqrt(float64(dot(x, x))))
	n = max(n, 1e-12)
	for i := range x {
		x[i] /= n
	}
	return x
}

// TestMaxLength runs the longest input BGE-M3 takes (8192 tokens) and checks
// that one more is refused: position 8194 is past the table.
func TestMaxLength(t *testing.T) {
	if testing.Short() {
		t.Skip("8192-token attention needs about 2 GB; skipped with -short")
	}
	dir := genDir(t, Config{Size: Tiny, Layout: LayoutHidden, Seed: 1})
	s := openSession(t, filepath.Join(dir, "model.onnx"), LayoutHidden, 0)
	maxTokens := Tiny.MaxPositions - 2
	res := s.run(t, [][]int64{textIDs(maxTokens, 8002, 9)})
	if want := []int64{1, int64(maxTokens), 32}; !equalShape(res[0].shape, want) {
		t.Fatalf("shape %v, want %v", res[0].shape, want)
	}
	checkFinite(t, "last_hidden_state", res[0].data)
	if _, err := s.tryRun(t, [][]int64{textIDs(maxTokens+1, 8002, 9)}); err == nil {
		t.Errorf("%d tokens ran; want an error (position past max_position_embeddings)", maxTokens+1)
	}
}

// TestFP16 checks the float16-weight model runs with float32 outputs and
// stays close to the float32 model of the same seed.
func TestFP16(t *testing.T) {
	rows := [][]int64{textIDs(20, 8002, 1), textIDs(7, 8002, 2)}
	var outs [2][]float32
	for i, fp16 := range []bool{false, true} {
		dir := genDir(t, Config{Size: Tiny, Layout: LayoutHeads, Seed: 3, FP16: fp16})
		outs[i] = openSession(t, filepath.Join(dir, "model.onnx"), LayoutHeads, 1).run(t, rows)[0].data
	}
	d := maxAbsDiff(outs[0], outs[1])
	t.Logf("dense_vecs fp16 weights vs float32: max |diff| = %g", d)
	if d > 0.01 {
		t.Errorf("fp16 weights moved dense_vecs by %g", d)
	}
}

// TestInlineWeightsBound: BGE-M3's full shape with its 250k-token
// vocabulary does not fit in one model.onnx and is refused before any
// weight is made, naming external data; with external data, with its
// weights in float16, or with the repository's small vocabulary it is
// accepted.
func TestInlineWeightsBound(t *testing.T) {
	full := Config{Size: M3, Layout: LayoutHidden, VocabSize: 250002}
	err := full.validate()
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "external data") {
		t.Fatalf("BGE-M3's size inline: %v, want a config error naming external data", err)
	}
	if b := full.weightBytes(); b < 2100<<20 || b > 2250<<20 {
		t.Errorf("BGE-M3's weights estimated at %d MiB, want about 2166 MiB (568M float32 values)", b>>20)
	}
	for _, c := range []Config{
		{Size: M3, Layout: LayoutHidden, VocabSize: 250002, ExternalData: true},
		{Size: M3, Layout: LayoutHidden, VocabSize: 250002, FP16: true},
		{Size: M3, Layout: LayoutHidden, VocabSize: 8002},
	} {
		if err := c.validate(); err != nil {
			t.Errorf("external %t, fp16 %t, vocab %d: %v", c.ExternalData, c.FP16, c.VocabSize, err)
		}
	}
}
