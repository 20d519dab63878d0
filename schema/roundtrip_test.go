package schema

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
)

func fullJob(enc Encoding) *Job {
	meta := map[string]any{"source": "s3://bucket/key", "tags": []any{"a", "b"}, "nested": map[string]any{"ok": true}}
	if enc == EncodingJSON {
		meta["n"] = json.Number("12345678901234567890")
		meta["f"] = json.Number("-0.5e-3")
	} else {
		meta["n"] = int64(-7)
		meta["big"] = uint64(math.MaxUint64)
		meta["f32"] = float32(1.5)
		meta["f64"] = math.Float64frombits(0x7ff8000000000001)
		meta["bin"] = []byte{0, 1, 2}
		meta["nil"] = nil
	}
	return &Job{
		V: 1, ID: "job-42", Texts: []string{"first text", "", "日本語 ✓", "bad \xff utf8"},
		Outputs:  []Output{OutputDense, OutputSparse, OutputColBERT},
		Truncate: ptr(false), Reply: "embed.results.job-42", Deadline: "2030-01-02T03:04:05.123Z",
		Priority: PriorityInteractive, Meta: meta,
	}
}

func TestJobRoundTrip(t *testing.T) {
	for _, enc := range []Encoding{EncodingMsgpack, EncodingJSON} {
		t.Run(enc.String(), func(t *testing.T) {
			for _, j := range []*Job{fullJob(enc), NewJob("minimal", "x"), {V: 1, ID: "t", Texts: []string{"y"}, Truncate: ptr(true)}} {
				if enc == EncodingJSON {
					j.Texts = fixUTF8(j.Texts)
				}
				data := mustEncodeJob(t, j, enc)
				got, err := DecodeJob(data, enc)
				if err != nil {
					t.Fatalf("DecodeJob(%s): %v", data, err)
				}
				if !sameJob(j, got) {
					t.Errorf("round trip changed the job:\n got %#v\nwant %#v", got, j)
				}
			}
		})
	}
}

// fixUTF8 drops invalid bytes: JSON strings cannot carry them (a JSON
// encoder substitutes U+FFFD).
func fixUTF8(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string([]rune(s))
	}
	return out
}

func fullResult(floats []float32) *Result {
	colbert := make([]Vector, 3)
	for i := range colbert {
		colbert[i] = Vector(floats)
	}
	return &Result{
		V: 1, ID: "job-42", Model: "bge-m3@0123abcd",
		Items: []Item{
			{Dense: floats, Sparse: &Sparse{IDs: []uint32{0, 5, 250001, math.MaxUint32}, Weights: Vector{0.5, -0, 1e-40, 3}},
				ColBERT: colbert, Tokens: 17, Truncated: true},
			{Error: &Error{Code: CodeInvalidUTF8, Message: "text 1 is not valid UTF-8"}},
			{Error: &Error{Code: CodeShapeNotWarmed, Message: "later", Retriable: true}},
			{Dense: Vector{1}},
		},
		Usage: Usage{Tokens: 20, PaddedTokens: 8, Cached: 2, CachedTokens: 12},
		Meta:  map[string]any{"source": "x"},
	}
}

func TestResultRoundTrip(t *testing.T) {
	finite := []float32{}
	for _, f := range specialFloats {
		if !math.IsNaN(float64(f)) && !math.IsInf(float64(f), 0) {
			finite = append(finite, f)
		}
	}
	tests := []struct {
		enc    Encoding
		floats []float32
	}{
		{EncodingMsgpack, specialFloats},
		{EncodingJSON, finite},
	}
	for _, tt := range tests {
		t.Run(tt.enc.String(), func(t *testing.T) {
			blob := &Result{V: 1, ID: "big", Model: "m@1", Usage: Usage{Tokens: 9000, PaddedTokens: 9000},
				Blob: &Blob{Name: "r.0123abcd", Size: 12 << 20, Digest: "SHA-256=abc_-"}}
			for _, res := range []*Result{fullResult(tt.floats), ErrorResult("j", Errorf(CodeOverloaded, "busy")), blob} {
				data, err := EncodeResult(res, tt.enc)
				if err != nil {
					t.Fatal(err)
				}
				got, err := DecodeResult(data, tt.enc)
				if err != nil {
					t.Fatalf("DecodeResult: %v", err)
				}
				if !sameResult(res, got) {
					t.Errorf("round trip changed the result:\n got %#v\nwant %#v", got, res)
				}
			}
		})
	}
}

func TestJSONFieldNames(t *testing.T) {
	data, err := EncodeResult(fullResult([]float32{0.25}), EncodingJSON)
	if err != nil {
		t.Fatal(err)
	}
	var generic map[string]any
	if err := json.Unmarshal(data, &generic); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"v", "id", "model", "items", "usage", "meta"} {
		if _, ok := generic[k]; !ok {
			t.Errorf("result JSON has no %q: %s", k, data)
		}
	}
	item := generic["items"].([]any)[0].(map[string]any)
	for _, k := range []string{"dense", "sparse", "colbert", "tokens", "truncated"} {
		if _, ok := item[k]; !ok {
			t.Errorf("item JSON has no %q", k)
		}
	}
	if d := item["dense"].([]any); d[0] != 0.25 {
		t.Errorf("dense in JSON = %v, want an array of numbers", d)
	}
	if cb := item["colbert"].([]any); len(cb) != 3 {
		t.Errorf("colbert in JSON = %v, want 3 arrays", cb)
	}
	errItem := generic["items"].([]any)[1].(map[string]any)
	if _, ok := errItem["dense"]; ok {
		t.Errorf("failed item carries a dense field: %v", errItem)
	}
	u := generic["usage"].(map[string]any)
	if u["tokens"] != 20.0 || u["padded_tokens"] != 8.0 || u["cached"] != 2.0 || u["cached_tokens"] != 12.0 {
		t.Errorf("usage = %v", u)
	}
}

func TestErrorResultOmitsEmpty(t *testing.T) {
	for _, enc := range []Encoding{EncodingMsgpack, EncodingJSON} {
		data, err := EncodeResult(ErrorResult("j1", Errorf(CodeEmptyJob, "no texts")), enc)
		if err != nil {
			t.Fatal(err)
		}
		var generic map[string]any
		if enc == EncodingJSON {
			err = json.Unmarshal(data, &generic)
		} else {
			generic, err = decodeGeneric(data)
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(generic) != 3 || generic["error"] == nil {
			t.Errorf("%s error result has fields %v, want only v, id, error", enc, generic)
		}
	}
}

func decodeGeneric(data []byte) (map[string]any, error) {
	var m map[string]any
	err := decodeMsgpack(data, customFunc(func(r reader) (err error) {
		m, err = r.meta()
		return err
	}))
	return m, err
}

func TestJobMsgpackFieldNames(t *testing.T) {
	m, err := decodeGeneric(mustEncodeJob(t, fullJob(EncodingMsgpack), EncodingMsgpack))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"v", "id", "texts", "outputs", "truncate", "reply", "deadline", "priority", "meta"}
	if len(m) != len(want) {
		t.Errorf("job fields = %v, want %v", m, want)
	}
	for _, k := range want {
		if _, ok := m[k]; !ok {
			t.Errorf("msgpack job has no %q", k)
		}
	}
	if m["v"] != int64(1) || m["truncate"] != false {
		t.Errorf("v = %#v, truncate = %#v", m["v"], m["truncate"])
	}
	m, err = decodeGeneric(mustEncodeJob(t, NewJob("a", "x"), EncodingMsgpack))
	if err != nil || len(m) != 3 {
		t.Errorf("minimal job fields = %v, %v; want v, id, texts", m, err)
	}
}

// TestUsageCachedOmitted: a usage without cached texts encodes as it did
// before the cache (two fields), so older readers and byte comparisons of
// results see no change.
func TestUsageCachedOmitted(t *testing.T) {
	for _, enc := range []Encoding{EncodingMsgpack, EncodingJSON} {
		data, err := EncodeResult(&Result{V: 1, ID: "j", Usage: Usage{Tokens: 3, PaddedTokens: 4}}, enc)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(data, []byte("cached")) {
			t.Errorf("%v: %q carries a cached field", enc, data)
		}
		data, err = EncodeResult(&Result{V: 1, ID: "j", Usage: Usage{Tokens: 3, Cached: 1, CachedTokens: 3}}, enc)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeResult(data, enc)
		if err != nil {
			t.Fatal(err)
		}
		if want := (Usage{Tokens: 3, Cached: 1, CachedTokens: 3}); got.Usage != want {
			t.Errorf("%v: usage %+v, want %+v", enc, got.Usage, want)
		}
	}
}
