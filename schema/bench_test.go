package schema

import (
	"testing"
)

// benchResult is one item with a 1024-dim dense vector and a 100 x 1024
// ColBERT matrix (about 410 KiB of floats), plus a small sparse vector.
func benchResult() *Result {
	const dim, tokens = 1024, 100
	flat := make([]float32, dim*(tokens+1))
	for i := range flat {
		flat[i] = float32(i%977) / 977
	}
	colbert := make([]Vector, tokens)
	for i := range colbert {
		colbert[i] = flat[dim*(i+1) : dim*(i+2)]
	}
	return &Result{
		V: 1, ID: "bench", Model: "bge-m3@0123abcd",
		Items: []Item{{
			Dense:   flat[:dim],
			Sparse:  &Sparse{IDs: []uint32{3, 17, 4242, 90000}, Weights: Vector{0.1, 0.2, 0.3, 0.4}},
			ColBERT: colbert, Tokens: tokens + 1,
		}},
		Usage: Usage{Tokens: tokens + 1, PaddedTokens: 128},
	}
}

// TestVectorCodecAllocs pins the allocation count of the benchmark
// result: a codec that allocated per float would need 100k allocations.
func TestVectorCodecAllocs(t *testing.T) {
	res := benchResult()
	data, err := EncodeResult(res, EncodingMsgpack)
	if err != nil {
		t.Fatal(err)
	}
	enc := testing.AllocsPerRun(20, func() { _, _ = EncodeResult(res, EncodingMsgpack) })
	if enc > 4 {
		t.Errorf("EncodeResult: %.0f allocations, want the output buffer only", enc)
	}
	// One per vector (101 plus sparse weights) and a handful for the
	// structure.
	dec := testing.AllocsPerRun(20, func() { _, _ = DecodeResult(data, EncodingMsgpack) })
	if dec > 130 {
		t.Errorf("DecodeResult: %.0f allocations, want about one per vector", dec)
	}
}

func BenchmarkEncodeResultMsgpack(b *testing.B) {
	res := benchResult()
	data, _ := EncodeResult(res, EncodingMsgpack)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeResult(res, EncodingMsgpack); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeResultMsgpack(b *testing.B) {
	data, _ := EncodeResult(benchResult(), EncodingMsgpack)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeResult(data, EncodingMsgpack); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeResultJSON(b *testing.B) {
	res := benchResult()
	data, _ := EncodeResult(res, EncodingJSON)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeResult(res, EncodingJSON); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeResultJSON(b *testing.B) {
	data, _ := EncodeResult(benchResult(), EncodingJSON)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeResult(data, EncodingJSON); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeJobMsgpack(b *testing.B) {
	texts := make([]string, 64)
	for i := range texts {
		texts[i] = "a passage of text of a typical length for a retrieval chunk, repeated a little to be realistic"
	}
	data, _ := EncodeJob(NewJob("bench", texts...), EncodingMsgpack)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := DefaultLimits().DecodeJob(data, EncodingMsgpack); err != nil {
			b.Fatal(err)
		}
	}
}
