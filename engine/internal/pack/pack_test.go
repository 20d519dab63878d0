package pack

import (
	"errors"
	"math"
	"slices"
	"testing"
)

func TestTiers(t *testing.T) {
	tests := []struct {
		lo, hi, steps int
		want          []int
	}{
		{8, 64, 1, []int{8, 16, 32, 64}},
		{8, 100, 1, []int{8, 16, 32, 64, 100}},
		{16, 64, 1, []int{16, 32, 64}},
		{8, 64, 4, []int{8, 16, 24, 32, 40, 48, 56, 64}},
		{8, 128, 4, []int{8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128}},
	}
	for _, tt := range tests {
		if got := Tiers(tt.lo, tt.hi, tt.steps); !slices.Equal(got, tt.want) {
			t.Errorf("Tiers(%d, %d, %d) = %v, want %v", tt.lo, tt.hi, tt.steps, got, tt.want)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := Config{MaxTokens: 64, MaxBatch: 4, Tiers: []int{8, 16}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	bad := []Config{
		{MaxTokens: 0, MaxBatch: 4, Tiers: []int{8}},
		{MaxTokens: 64, MaxBatch: 0, Tiers: []int{8}},
		{MaxTokens: 64, MaxBatch: 4},
		{MaxTokens: 64, MaxBatch: 4, Tiers: []int{16, 8}},
		{MaxTokens: 64, MaxBatch: 4, Tiers: []int{8, 8}},
	}
	for i, c := range bad {
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("config %d: err %v, want ErrConfig", i, err)
		}
	}
}

func TestFit(t *testing.T) {
	want := Cost{A: 2e-6, Bq: 3e-9}
	var samples []Sample
	for _, s := range [][2]int{{1, 64}, {4, 128}, {2, 512}, {1, 2048}} {
		samples = append(samples, Sample{Batch: s[0], Seq: s[1], Cost: want.Of(s[0], s[1])})
	}
	got, err := Fit(samples)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(got.A-want.A) > 1e-12 || math.Abs(got.Bq-want.Bq) > 1e-15 {
		t.Errorf("Fit = %+v, want %+v", got, want)
	}
	// Noise making the quadratic term negative clamps it to zero.
	got, err = Fit([]Sample{{1, 64, 64}, {1, 128, 120}, {1, 256, 230}})
	if err != nil || got.Bq != 0 || got.A <= 0 {
		t.Errorf("Fit with negative quadratic = %+v, %v; want A > 0, Bq = 0", got, err)
	}
	if _, err := Fit([]Sample{{1, 64, 1}, {2, 64, 2}}); !errors.Is(err, ErrFit) {
		t.Errorf("Fit with one sequence length: err %v, want ErrFit", err)
	}
}
