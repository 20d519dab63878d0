//go:build cgo

package ort

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/model"
	"github.com/jetembed/jetembed/engine/model/modeltest"
)

// initORT loads the library named by $JETEMBED_ORT_LIB (the Makefile sets
// it) or skips the test.
func initORT(tb testing.TB) Library {
	tb.Helper()
	p := os.Getenv(EnvLibrary)
	if p == "" {
		tb.Skip("JETEMBED_ORT_LIB not set; run `make test` or `make deps`")
	}
	if _, err := os.Stat(p); err != nil {
		tb.Skipf("JETEMBED_ORT_LIB=%s: %v", p, err)
	}
	lib, err := Init(LibraryOptions{Path: p})
	if err != nil {
		tb.Fatal(err)
	}
	return lib
}

func openTiny(tb testing.TB, layout model.Layout, p Provider) (*Session, modeltest.Spec) {
	tb.Helper()
	initORT(tb)
	s := modeltest.Tiny
	s.Layout = layout
	dir := tb.TempDir()
	must(tb, modeltest.Write(dir, s))
	m, err := model.Open(dir, model.DefaultOptions())
	must(tb, err)
	sess, err := Open(m, p)
	must(tb, err)
	tb.Cleanup(func() { must(tb, sess.Close()) })
	return sess, s
}

func TestInit(t *testing.T) {
	lib := initORT(t)
	if err := checkVersion(lib.Version); err != nil || lib.Path != os.Getenv(EnvLibrary) {
		t.Errorf("library %+v: %v", lib, err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			again, err := Init(LibraryOptions{})
			if err != nil || again != lib {
				t.Errorf("repeated Init = %+v, %v; want %+v", again, err, lib)
			}
		})
	}
	wg.Wait()
	missing := filepath.Join(t.TempDir(), "libonnxruntime.so.1")
	_, err := Init(LibraryOptions{Path: missing})
	if !errors.Is(err, ErrLibraryNotFound) || !strings.Contains(err.Error(), missing) ||
		!strings.Contains(err.Error(), "make deps") {
		t.Errorf("missing library: %v", err)
	}
	t.Logf("onnx runtime %s from %s", lib.Version, lib.Path)
}

// input builds a right-padded chunk: row r holds lens[r] real tokens.
func input(batch, seq int, lens []int) engine.RunInput {
	in := engine.RunInput{Batch: batch, Seq: seq, IDs: make([]int64, batch*seq), Mask: make([]int64, batch*seq)}
	for r := range batch {
		for i := range seq {
			k := r*seq + i
			if i < lens[r] {
				in.IDs[k], in.Mask[k] = int64(5+(r*31+i*7)%200), 1
			} else {
				in.IDs[k] = 1 // pad
			}
		}
	}
	return in
}

func TestSessionHidden(t *testing.T) {
	sess, spec := openTiny(t, model.LayoutHidden, Provider{IntraOpThreads: 1})
	for _, tc := range []struct{ b, s int }{{1, 1}, {3, 17}, {2, 8192}} {
		lens := []int{tc.s, max(1, tc.s/2), 1}[:tc.b]
		in := input(tc.b, tc.s, lens)
		out, err := sess.Run(context.Background(), in)
		if err != nil {
			t.Fatalf("%dx%d: %v", tc.b, tc.s, err)
		}
		if out.Dim != spec.Hidden || len(out.Hidden) != tc.b*tc.s*spec.Hidden || out.Dense != nil {
			t.Fatalf("%dx%d: dim %d, %d hidden values", tc.b, tc.s, out.Dim, len(out.Hidden))
		}
		for k := range in.IDs {
			want := spec.HiddenState(in.IDs[k], in.Mask[k])
			got := out.Hidden[k*spec.Hidden : (k+1)*spec.Hidden]
			if d := maxDiff(got, want); d > 1e-5 {
				t.Fatalf("%dx%d position %d: got %v, want %v", tc.b, tc.s, k, got, want)
			}
		}
	}
}

func TestSessionHeads(t *testing.T) {
	sess, spec := openTiny(t, model.LayoutHeads, Provider{})
	H, C := spec.Hidden, spec.ColBERTDim
	for _, tc := range []struct{ b, s int }{{1, 1}, {3, 17}, {2, 8192}} {
		lens := []int{tc.s, max(1, tc.s/2), 1}[:tc.b]
		in := input(tc.b, tc.s, lens)
		out, err := sess.Run(context.Background(), in)
		if err != nil {
			t.Fatalf("%dx%d: %v", tc.b, tc.s, err)
		}
		if len(out.Dense) != tc.b*H || len(out.Sparse) != tc.b*tc.s || out.Hidden != nil {
			t.Fatalf("%dx%d: %d dense, %d sparse values", tc.b, tc.s, len(out.Dense), len(out.Sparse))
		}
		if out.ColBERTLen != tc.s-1 || out.ColBERTDim != C || len(out.ColBERT) != tc.b*(tc.s-1)*C {
			t.Fatalf("%dx%d: colbert %d rows of %d, %d values", tc.b, tc.s, out.ColBERTLen, out.ColBERTDim, len(out.ColBERT))
		}
		for r := range tc.b {
			h := func(i int) []float32 { k := r*tc.s + i; return spec.HiddenState(in.IDs[k], in.Mask[k]) }
			if d := maxDiff(out.Dense[r*H:(r+1)*H], normalize(h(0))); d > 1e-5 {
				t.Errorf("%dx%d row %d dense off by %g", tc.b, tc.s, r, d)
			}
			for i := range min(tc.s, 64) {
				want := max(0, dot(spec.SparseW(), h(i))+spec.SparseB())
				if got := out.Sparse[r*tc.s+i]; math.Abs(float64(got-want)) > 1e-5 {
					t.Errorf("%dx%d row %d pos %d sparse = %g, want %g", tc.b, tc.s, r, i, got, want)
				}
				if i == 0 {
					continue
				}
				want2 := make([]float32, C)
				for c := range C {
					want2[c] = dot(spec.ColBERTW()[c*H:(c+1)*H], h(i)) + spec.ColBERTB()[c]
				}
				k := (r*(tc.s-1) + i - 1) * C
				if d := maxDiff(out.ColBERT[k:k+C], normalize(want2)); d > 1e-5 {
					t.Errorf("%dx%d row %d pos %d colbert off by %g", tc.b, tc.s, r, i, d)
				}
			}
		}
	}
}

func TestSessionRunErrors(t *testing.T) {
	sess, _ := openTiny(t, model.LayoutHidden, Provider{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := sess.Run(ctx, input(1, 4, []int{4})); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled ctx: %v", err)
	}
	// A live cancellable ctx takes the terminate-flag path and must still run.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	if out, err := sess.Run(ctx, input(2, 4, []int{4, 2})); err != nil || len(out.Hidden) != 2*4*8 {
		t.Errorf("cancellable ctx: %d values, %v", len(out.Hidden), err)
	}
	bad := input(2, 4, []int{4, 2})
	bad.Mask = bad.Mask[:7]
	if _, err := sess.Run(context.Background(), bad); !errors.Is(err, ErrInput) {
		t.Errorf("short mask: %v", err)
	}
	if _, err := sess.Run(context.Background(), engine.RunInput{}); !errors.Is(err, ErrInput) {
		t.Errorf("empty input: %v", err)
	}
	must(t, sess.Close())
	must(t, sess.Close())
	if _, err := sess.Run(context.Background(), input(1, 1, []int{1})); !errors.Is(err, ErrClosed) {
		t.Errorf("run after close: %v", err)
	}
}

// TestGPUProvidersFail runs on the CPU-only ONNX Runtime of `make deps`: a
// GPU request must fail loudly, naming the provider, not run on the CPU.
func TestGPUProvidersFail(t *testing.T) {
	initORT(t)
	dir := t.TempDir()
	must(t, modeltest.Write(dir, modeltest.Tiny))
	m, err := model.Open(dir, model.DefaultOptions())
	must(t, err)
	for _, p := range []Provider{{Kind: CUDA}, {Kind: TensorRT, FP16: true, EngineCacheDir: t.TempDir()}} {
		sess, err := Open(m, p)
		if err == nil {
			sess.Close()
			t.Skipf("%v registered: this ONNX Runtime has GPU support", p)
		}
		if !errors.Is(err, ErrProvider) || !strings.Contains(err.Error(), string(p.Kind)) {
			t.Errorf("%v: err = %v, want ErrProvider naming %s", p, err, p.Kind)
		}
		t.Logf("%v: %v", p, err)
	}
}

func dot(a, b []float32) float32 {
	var s float32
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

func normalize(v []float32) []float32 {
	n := float32(math.Sqrt(float64(dot(v, v))))
	out := make([]float32, len(v))
	for i := range v {
		out[i] = v[i] / n
	}
	return out
}

func maxDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// TestSessionFeedsDeclaredInputs: a graph that takes token_type_ids and
// position_ids, declared int32 or int64, is fed zeros and XLM-R's
// padding-offset positions (pad + 1 + index, pad at padding).
func TestSessionFeedsDeclaredInputs(t *testing.T) {
	initORT(t)
	for _, int32s := range []bool{false, true} {
		s := modeltest.Tiny
		s.Int32, s.TokenTypes, s.Positions = int32s, true, true
		dir := t.TempDir()
		must(t, modeltest.Write(dir, s))
		m, err := model.Open(dir, model.DefaultOptions())
		must(t, err)
		if got := strings.Join(m.Graph.Inputs, ","); got != "input_ids,attention_mask,token_type_ids,position_ids" {
			t.Fatalf("inputs %s", got)
		}
		sess, err := Open(m, Provider{IntraOpThreads: 1})
		must(t, err)
		defer sess.Close()
		in := input(3, 9, []int{9, 4, 1})
		out, err := sess.Run(context.Background(), in)
		if err != nil {
			t.Fatalf("int32 %v: %v", int32s, err)
		}
		for k := range in.IDs {
			pos := int64(1) // the pad id, at padding
			if in.Mask[k] == 1 {
				pos = int64(k%9) + 2
			}
			want := s.HiddenStateAt(in.IDs[k], in.Mask[k], pos)
			if d := maxDiff(out.Hidden[k*s.Hidden:(k+1)*s.Hidden], want); d > 1e-5 {
				t.Fatalf("int32 %v, position %d: off by %g", int32s, k, d)
			}
		}
	}
}

// TestSessionSentenceTransformersExport: a graph exported the way
// sentence-transformers does it (token_embeddings beside a pooled
// sentence_embedding, listed first) loads as the hidden layout and runs
// for its token_embeddings.
func TestSessionSentenceTransformersExport(t *testing.T) {
	initORT(t)
	s := modeltest.Tiny
	s.SentenceTransformers = true
	dir := t.TempDir()
	must(t, modeltest.Write(dir, s))
	m, err := model.Open(dir, model.DefaultOptions())
	must(t, err)
	if m.Layout != model.LayoutHidden || !slices.Equal(m.Graph.RunOutputs(m.Layout), []string{model.OutputTokenEmbeddings}) {
		t.Fatalf("layout %v, outputs %v", m.Layout, m.Graph.RunOutputs(m.Layout))
	}
	sess, err := Open(m, Provider{IntraOpThreads: 1})
	must(t, err)
	defer sess.Close()
	in := input(2, 5, []int{5, 3})
	out, err := sess.Run(context.Background(), in)
	must(t, err)
	for k := range in.IDs {
		want := s.HiddenState(in.IDs[k], in.Mask[k])
		if d := maxDiff(out.Hidden[k*s.Hidden:(k+1)*s.Hidden], want); d > 1e-5 {
			t.Fatalf("position %d: off by %g", k, d)
		}
	}
}
