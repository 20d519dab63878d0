//go:build cgo

package onnxgen

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	ort "github.com/yalue/onnxruntime_go"
)

var (
	ortOnce sync.Once
	ortErr  error
)

// needORT initializes ONNX Runtime once per test binary from
// $JETEMBED_ORT_LIB, or skips the test when the library is not there.
func needORT(tb testing.TB) {
	tb.Helper()
	lib := os.Getenv("JETEMBED_ORT_LIB")
	if lib == "" {
		lib = filepath.Join("..", "..", ".deps", "onnxruntime", "libonnxruntime.so.1")
	}
	if _, err := os.Stat(lib); err != nil {
		tb.Skipf("ONNX Runtime library not found (%v); run `make deps` or set JETEMBED_ORT_LIB", err)
	}
	ortOnce.Do(func() {
		ort.SetSharedLibraryPath(lib)
		ortErr = ort.InitializeEnvironment()
	})
	if ortErr != nil {
		tb.Fatalf("initialize ONNX Runtime from %s: %v", lib, ortErr)
	}
}

// session is a loaded generated model with its output names.
type session struct {
	s       *ort.DynamicAdvancedSession
	outputs []string
}

func openSession(tb testing.TB, path string, layout Layout, threads int) *session {
	tb.Helper()
	needORT(tb)
	opts, err := ort.NewSessionOptions()
	if err != nil {
		tb.Fatal(err)
	}
	defer opts.Destroy()
	if threads > 0 {
		if err := opts.SetIntraOpNumThreads(threads); err != nil {
			tb.Fatal(err)
		}
		if err := opts.SetInterOpNumThreads(1); err != nil {
			tb.Fatal(err)
		}
	}
	outputs := []string{"last_hidden_state"}
	if layout == LayoutHeads {
		outputs = []string{"dense_vecs", "sparse_vecs", "colbert_vecs"}
	}
	s, err := ort.NewDynamicAdvancedSession(path, []string{"input_ids", "attention_mask"}, outputs, opts)
	if err != nil {
		tb.Fatalf("load %s: %v", path, err)
	}
	tb.Cleanup(func() { s.Destroy() })
	return &session{s: s, outputs: outputs}
}

// result is one output tensor copied out of ONNX Runtime.
type result struct {
	shape []int64
	data  []float32
}

// run runs rows of token ids, right-padding them with PadID to the longest.
func (s *session) run(tb testing.TB, rows [][]int64) []result {
	tb.Helper()
	res, err := s.tryRun(tb, rows)
	if err != nil {
		tb.Fatal(err)
	}
	return res
}

// tryRun is run returning the session's error instead of failing.
func (s *session) tryRun(tb testing.TB, rows [][]int64) ([]result, error) {
	tb.Helper()
	seq := 0
	for _, r := range rows {
		seq = max(seq, len(r))
	}
	ids := make([]int64, 0, len(rows)*seq)
	mask := make([]int64, 0, len(rows)*seq)
	for _, r := range rows {
		for i := range seq {
			if i < len(r) {
				ids, mask = append(ids, r[i]), append(mask, 1)
			} else {
				ids, mask = append(ids, PadID), append(mask, 0)
			}
		}
	}
	shape := ort.NewShape(int64(len(rows)), int64(seq))
	idT, err := ort.NewTensor(shape, ids)
	if err != nil {
		tb.Fatal(err)
	}
	defer idT.Destroy()
	maskT, err := ort.NewTensor(shape, mask)
	if err != nil {
		tb.Fatal(err)
	}
	defer maskT.Destroy()
	outs := make([]ort.Value, len(s.outputs))
	if err := s.s.Run([]ort.Value{idT, maskT}, outs); err != nil {
		return nil, fmt.Errorf("run batch %d x seq %d: %w", len(rows), seq, err)
	}
	res := make([]result, len(outs))
	for i, o := range outs {
		t, ok := o.(*ort.Tensor[float32])
		if !ok {
			tb.Fatalf("output %s is %T, want float32 tensor", s.outputs[i], o)
		}
		res[i] = result{shape: []int64(t.GetShape()), data: append([]float32(nil), t.GetData()...)}
		o.Destroy()
	}
	return res, nil
}
