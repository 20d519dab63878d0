package schema

import (
	"bytes"
	"math"
	"reflect"
	"testing"
)

// sameAny compares decoded values, floats by bit pattern so that NaN
// payloads and -0 count as preserved only when their bits are.
func sameAny(a, b any) bool {
	switch x := a.(type) {
	case float32:
		y, ok := b.(float32)
		return ok && math.Float32bits(x) == math.Float32bits(y)
	case float64:
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	case []byte:
		y, ok := b.([]byte)
		return ok && bytes.Equal(x, y)
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameAny(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !sameAny(v, w) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

// sameVector compares vectors bit for bit; nil and empty differ.
func sameVector(a, b Vector) bool {
	if (a == nil) != (b == nil) || len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// sameJob reports whether two jobs are equal on the wire: empty and nil
// slices and maps are the same (both are omitted).
func sameJob(a, b *Job) bool {
	if a.V != b.V || a.ID != b.ID || a.Reply != b.Reply || a.Deadline != b.Deadline ||
		a.Truncates() != b.Truncates() || (a.Truncate == nil) != (b.Truncate == nil) {
		return false
	}
	if len(a.Texts) != len(b.Texts) || len(a.Outputs) != len(b.Outputs) || len(a.Meta) != len(b.Meta) {
		return false
	}
	for i := range a.Texts {
		if a.Texts[i] != b.Texts[i] {
			return false
		}
	}
	for i := range a.Outputs {
		if a.Outputs[i] != b.Outputs[i] {
			return false
		}
	}
	return len(a.Meta) == 0 || sameAny(a.Meta, b.Meta)
}

func sameItem(a, b Item) bool {
	if a.Tokens != b.Tokens || a.Truncated != b.Truncated || !reflect.DeepEqual(a.Error, b.Error) {
		return false
	}
	if !sameVector(a.Dense, b.Dense) || len(a.ColBERT) != len(b.ColBERT) || (a.Sparse == nil) != (b.Sparse == nil) {
		return false
	}
	for i := range a.ColBERT {
		if !sameVector(a.ColBERT[i], b.ColBERT[i]) {
			return false
		}
	}
	if a.Sparse != nil {
		if !reflect.DeepEqual(a.Sparse.IDs, b.Sparse.IDs) || !sameVector(a.Sparse.Weights, b.Sparse.Weights) {
			return false
		}
	}
	return true
}

func sameResult(a, b *Result) bool {
	if a.V != b.V || a.ID != b.ID || a.Model != b.Model || a.Usage != b.Usage ||
		!reflect.DeepEqual(a.Error, b.Error) || !reflect.DeepEqual(a.Blob, b.Blob) || len(a.Items) != len(b.Items) || len(a.Meta) != len(b.Meta) {
		return false
	}
	for i := range a.Items {
		if !sameItem(a.Items[i], b.Items[i]) {
			return false
		}
	}
	return len(a.Meta) == 0 || sameAny(a.Meta, b.Meta)
}

func mustEncodeJob(t testing.TB, j *Job, enc Encoding) []byte {
	t.Helper()
	b, err := EncodeJob(j, enc)
	if err != nil {
		t.Fatalf("EncodeJob(%s): %v", enc, err)
	}
	return b
}

// codeOf returns the code of a *Error, or "" for nil.
func codeOf(e *Error) Code {
	if e == nil {
		return ""
	}
	return e.Code
}
