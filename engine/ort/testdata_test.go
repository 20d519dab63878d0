//go:build cgo

package ort

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/jetembed/jetembed/engine/model"
)

func openDir(tb testing.TB, dir string, p Provider) (*Session, *model.Model) {
	tb.Helper()
	initORT(tb)
	m, err := model.Open(dir, model.DefaultOptions())
	must(tb, err)
	sess, err := Open(m, p)
	must(tb, err)
	tb.Cleanup(func() { must(tb, sess.Close()) })
	return sess, m
}

func testdataModel(name string) string { return filepath.Join("..", "..", "testdata", "models", name) }

// TestHeadsMatchHidden runs the two committed tiny exports of one model:
// BGE-M3's heads applied in Go to last_hidden_state must give what the
// three-head graph returns, for every real token.
func TestHeadsMatchHidden(t *testing.T) {
	hidden, hm := openDir(t, testdataModel("tiny-hidden"), Provider{IntraOpThreads: 1})
	heads, _ := openDir(t, testdataModel("tiny-heads"), Provider{IntraOpThreads: 1})
	const B, S = 3, 23
	lens := []int{S, 9, 2}
	in := input(B, S, lens)
	ho, err := hidden.Run(context.Background(), in)
	must(t, err)
	do, err := heads.Run(context.Background(), in)
	must(t, err)
	H, C := hm.Config.HiddenSize, hm.ColBERT.Dim
	if ho.Dim != H || do.Dim != H || do.ColBERTLen != S-1 || do.ColBERTDim != C {
		t.Fatalf("dims: hidden %d, heads %d, colbert %dx%d", ho.Dim, do.Dim, do.ColBERTLen, do.ColBERTDim)
	}
	const tol = 2e-4
	for r := range B {
		h := func(i int) []float32 { k := r*S + i; return ho.Hidden[k*H : (k+1)*H] }
		if d := maxDiff(do.Dense[r*H:(r+1)*H], normalize(h(0))); d > tol {
			t.Errorf("row %d dense off by %g", r, d)
		}
		for i := range lens[r] {
			want := max(0, dot(hm.Sparse.W, h(i))+hm.Sparse.B)
			if got := do.Sparse[r*S+i]; abs(got-want) > tol {
				t.Errorf("row %d pos %d sparse = %g, want %g", r, i, got, want)
			}
			if i == 0 {
				continue
			}
			v := make([]float32, C)
			for c := range C {
				v[c] = dot(hm.ColBERT.W[c*H:(c+1)*H], h(i)) + hm.ColBERT.B[c]
			}
			k := (r*(S-1) + i - 1) * C
			if d := maxDiff(do.ColBERT[k:k+C], normalize(v)); d > tol {
				t.Errorf("row %d pos %d colbert off by %g", r, i, d)
			}
		}
	}
}

// TestTestdataShapes runs the committed tiny models at a few shapes. The
// 8192-token maximum is covered by the attention-free modeltest graphs:
// here one such run materializes 1 GB of attention scores and takes ~20 s.
func TestTestdataShapes(t *testing.T) {
	for _, name := range []string{"tiny-hidden", "tiny-heads"} {
		sess, m := openDir(t, testdataModel(name), Provider{})
		for _, sh := range []Shape{{1, 1}, {3, 17}, {2, 1024}} {
			lens := []int{sh.Seq, sh.Seq / 2, 1}[:sh.Batch]
			lens[0] = sh.Seq
			out, err := sess.Run(context.Background(), input(sh.Batch, sh.Seq, lens))
			if err != nil {
				t.Fatalf("%s %v: %v", name, sh, err)
			}
			n := len(out.Hidden) + len(out.Dense) + len(out.Sparse) + len(out.ColBERT)
			want := sh.Batch * sh.Seq * m.Config.HiddenSize
			if m.Layout == model.LayoutHeads {
				want = sh.Batch * (m.Config.HiddenSize + sh.Seq + (sh.Seq-1)*m.Config.HiddenSize)
			}
			if n != want {
				t.Errorf("%s %v: %d output values, want %d", name, sh, n, want)
			}
		}
	}
}

func abs(x float32) float32 { return max(x, -x) }
