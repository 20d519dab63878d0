package model

import (
	"bytes"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"
)

func testdataONNX(name string) string {
	return filepath.Join("..", "..", "testdata", "models", name, "model.onnx")
}

// TestRewriteInt8Layers: every encoder linear layer of the committed
// three-head model is quantized, the heads after the last LayerNorm are
// not, and KeepFP32 keeps what it names.
func TestRewriteInt8Layers(t *testing.T) {
	path := testdataONNX("tiny-heads")
	rw, err := RewriteInt8(path, Int8Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rw.Linears != 12 || rw.Quantized != 12 || len(rw.Kept) != 0 {
		t.Fatalf("linears %d, quantized %d, kept %v", rw.Linears, rw.Quantized, rw.Kept)
	}
	if n := bytes.Count(rw.ONNX, []byte("MatMulIntegerToFloat")); n < 12 {
		t.Errorf("%d MatMulIntegerToFloat mentions", n)
	}
	for _, head := range []string{"sparse_linear.weight", "colbert_linear.weight"} {
		if !bytes.Contains(rw.ONNX, []byte(head)) || bytes.Contains(rw.ONNX, []byte(head+"_int8")) {
			t.Errorf("head %s not kept in float32", head)
		}
	}
	if rw.Int8Bytes*3 > rw.FP32Bytes {
		t.Errorf("weights %d -> %d bytes", rw.FP32Bytes, rw.Int8Bytes)
	}
	rw, err = RewriteInt8(path, Int8Options{KeepFP32: func(node, weight string) bool { return strings.Contains(weight, "layer.1.output.dense") }})
	if err != nil {
		t.Fatal(err)
	}
	if rw.Quantized != 11 || len(rw.Kept) != 1 || !strings.Contains(rw.Int8Summary(), "float32: ") {
		t.Fatalf("kept: %d quantized, %v", rw.Quantized, rw.Kept)
	}
	_, err = RewriteInt8(path, Int8Options{KeepFP32: func(string, string) bool { return true }})
	if !errors.Is(err, ErrNoLinear) {
		t.Fatalf("all kept: %v", err)
	}
}

// TestRewriteInt8External reads weights from external data (the torch
// export) and from float16 initializers behind a Cast.
func TestRewriteInt8External(t *testing.T) {
	for _, path := range []string{
		testdataONNX("torch-m3-heads"),
		filepath.Join("..", "..", "testdata", "models", "torch-m3", "onnx", "model_fp16.onnx"),
	} {
		rw, err := RewriteInt8(path, Int8Options{Attention: true})
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if rw.Quantized != 12 || rw.Attention == nil || rw.Attention.Fused != 2 {
			t.Fatalf("%s: quantized %d, attention %+v", path, rw.Quantized, rw.Attention)
		}
	}
}

// TestQuantizeColumns: per-column scales, values within one step, the
// transposed (Gemm transB) layout read the same.
func TestQuantizeColumns(t *testing.T) {
	const k, n = 5, 3
	w := []float32{1, -2, 0, 0.5, 2, 0, -1, 0.25, 0, 0.3, -0.7, 0, 0.9, 1.9, 0}
	q, s := quantizeColumns(w, k, n, false)
	if s[2] != 1 || math.Abs(float64(s[0])-1.0/127) > 1e-7 || math.Abs(float64(s[1])-2.0/127) > 1e-7 {
		t.Fatalf("scales %v", s)
	}
	for r := range k {
		for c := range n {
			if d := math.Abs(float64(int8(q[r*n+c]))*float64(s[c]) - float64(w[r*n+c])); d > float64(s[c])/2+1e-7 {
				t.Errorf("(%d,%d) off by %g", r, c, d)
			}
		}
	}
	wt := make([]float32, len(w))
	for r := range k {
		for c := range n {
			wt[c*k+r] = w[r*n+c]
		}
	}
	qt, st := quantizeColumns(wt, k, n, true)
	if !bytes.Equal(q, qt) || st[0] != s[0] || st[1] != s[1] {
		t.Error("the transposed layout quantizes differently")
	}
}
