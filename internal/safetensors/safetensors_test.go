package safetensors

import (
	"math"
	"os"
	"path/filepath"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.safetensors")
	want := map[string]Tensor{
		"weight": {Shape: []int{2, 3}, Data: []float32{1, -2, 3.5, 0, 1e-7, -0}},
		"bias":   {Shape: []int{1}, Data: []float32{0.25}},
	}
	if err := WriteFile(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for name, w := range want {
		g := got[name]
		if len(g.Data) != len(w.Data) || len(g.Shape) != len(w.Shape) {
			t.Fatalf("%s: got %+v want %+v", name, g, w)
		}
		for i := range w.Data {
			if g.Data[i] != w.Data[i] {
				t.Errorf("%s[%d] = %v, want %v", name, i, g.Data[i], w.Data[i])
			}
		}
	}
}

func TestReadRejectsCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.safetensors")
	if err := WriteFile(path, map[string]Tensor{"w": {Shape: []int{4}, Data: []float32{1, 2, 3, 4}}}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	for name, data := range map[string][]byte{
		"truncated data":  b[:len(b)-3],
		"empty":           nil,
		"huge header":     {0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0},
		"header not json": append([]byte{4, 0, 0, 0, 0, 0, 0, 0}, "nope"...),
	} {
		p := filepath.Join(t.TempDir(), "bad")
		os.WriteFile(p, data, 0o644)
		if _, err := ReadFile(p); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestHalfToFloat(t *testing.T) {
	for _, c := range []struct {
		h    uint16
		want float32
	}{{0x3c00, 1}, {0xc000, -2}, {0x0001, float32(math.Pow(2, -24))}, {0x7bff, 65504}, {0, 0}} {
		if got := HalfToFloat(c.h); got != c.want {
			t.Errorf("HalfToFloat(%#x) = %v, want %v", c.h, got, c.want)
		}
	}
}
