package onnxgen

import (
	"math"
	"testing"

	"github.com/jetembed/jetembed/internal/safetensors"
)

func TestFloatToHalf(t *testing.T) {
	for _, tc := range []struct {
		in   float32
		want uint16
	}{
		{0, 0x0000},
		{float32(math.Copysign(0, -1)), 0x8000},
		{1, 0x3c00},
		{-2, 0xc000},
		{65504, 0x7bff},
		{65520, 0x7c00}, // rounds up to +Inf
		{float32(math.Inf(-1)), 0xfc00},
		{5.960464477539063e-08, 0x0001}, // smallest subnormal
		{6.103515625e-05, 0x0400},       // smallest normal
		{1 + 1.0/2048, 0x3c00},          // tie rounds to even (down)
		{1 + 3.0/2048, 0x3c02},          // tie rounds to even (up)
		{0.1, 0x2e66},
	} {
		if got := floatToHalf(tc.in); got != tc.want {
			t.Errorf("floatToHalf(%g) = %#04x, want %#04x", tc.in, got, tc.want)
		}
	}
	if got := floatToHalf(float32(math.NaN())); got&0x7c00 != 0x7c00 || got&0x3ff == 0 {
		t.Errorf("floatToHalf(NaN) = %#04x, not a NaN", got)
	}
	// Every finite half survives half -> float -> half.
	for h := range uint32(0x10000) {
		if h&0x7c00 == 0x7c00 {
			continue
		}
		if got := floatToHalf(safetensors.HalfToFloat(uint16(h))); got != uint16(h) {
			t.Fatalf("round trip of %#04x gave %#04x", h, got)
		}
	}
}

func TestWeightsStatistics(t *testing.T) {
	w := newWeights(Tiny, 1000, 3)
	var sum, sq float64
	for _, v := range w.word {
		sum += float64(v)
		sq += float64(v) * float64(v)
	}
	n := float64(len(w.word))
	mean, std := sum/n, math.Sqrt(sq/n-(sum/n)*(sum/n))
	if math.Abs(mean) > 0.001 || math.Abs(std-initStd) > 0.001 {
		t.Errorf("word embeddings mean %g std %g, want about 0 and %g", mean, std, initStd)
	}
	if w2 := newWeights(Tiny, 1000, 3); w2.colbertW[17] != w.colbertW[17] {
		t.Error("same seed gave different weights")
	}
}
