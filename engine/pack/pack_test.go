package pack

import (
	"errors"
	"math"
	"math/rand/v2"
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
		{MaxTokens: 64, MaxBatch: 4, Tiers: []int{8}, MaxCost: -1},
	}
	for i, c := range bad {
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("config %d: err %v, want ErrConfig", i, err)
		}
	}
}

type chunkWant struct {
	items []int
	seq   int
	real  int
}

func TestPack(t *testing.T) {
	tiers := []int{8, 16, 32, 64}
	tests := []struct {
		name    string
		cfg     Config
		lengths []int
		want    []chunkWant
	}{
		{
			name:    "one tier fills one chunk",
			cfg:     Config{MaxTokens: 64, MaxBatch: 8, Tiers: tiers},
			lengths: []int{3, 5, 4},
			want:    []chunkWant{{[]int{1, 2, 0}, 8, 12}},
		},
		{
			name:    "tiers never mix",
			cfg:     Config{MaxTokens: 1024, MaxBatch: 8, Tiers: tiers},
			lengths: []int{5, 20, 7, 30, 9},
			want: []chunkWant{
				{[]int{3, 1}, 32, 50},
				{[]int{4}, 16, 9},
				{[]int{2, 0}, 8, 12},
			},
		},
		{
			name:    "token budget splits evenly",
			cfg:     Config{MaxTokens: 32, MaxBatch: 8, Tiers: tiers},
			lengths: []int{8, 8, 8, 8, 8, 8},
			// 4 rows fit 32 tokens; 6 items make two chunks of 3, not 4+2.
			want: []chunkWant{{[]int{0, 1, 2}, 8, 24}, {[]int{3, 4, 5}, 8, 24}},
		},
		{
			name:    "batch cap",
			cfg:     Config{MaxTokens: 1000, MaxBatch: 2, Tiers: tiers},
			lengths: []int{1, 2, 3},
			want:    []chunkWant{{[]int{2, 1}, 8, 5}, {[]int{0}, 8, 1}},
		},
		{
			name:    "text over budget and over last tier runs alone at its length",
			cfg:     Config{MaxTokens: 64, MaxBatch: 8, Tiers: tiers},
			lengths: []int{100, 70, 4},
			want:    []chunkWant{{[]int{0}, 100, 100}, {[]int{1}, 70, 70}, {[]int{2}, 8, 4}},
		},
		{
			name:    "failed items skipped",
			cfg:     Config{MaxTokens: 64, MaxBatch: 8, Tiers: tiers},
			lengths: []int{0, 4, -1},
			want:    []chunkWant{{[]int{1}, 8, 4}},
		},
		{
			name: "cost budget",
			// Cost of 2x64 = 2*64 + 2*64*64/64 = 256; 3 rows would cost 384.
			cfg:     Config{MaxTokens: 4096, MaxBatch: 8, Tiers: tiers, Cost: Cost{A: 1, Bq: 1.0 / 64}, MaxCost: 300},
			lengths: []int{60, 60, 60, 60},
			want:    []chunkWant{{[]int{0, 1}, 64, 120}, {[]int{2, 3}, 64, 120}},
		},
		{
			name:    "empty",
			cfg:     Config{MaxTokens: 64, MaxBatch: 8, Tiers: tiers},
			lengths: nil,
			want:    nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			got := p.Pack(tt.lengths)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d chunks %+v, want %d", len(got), got, len(tt.want))
			}
			for i, c := range got {
				w := tt.want[i]
				if !slices.Equal(c.Items, w.items) || c.Seq != w.seq || c.RealTokens != w.real {
					t.Errorf("chunk %d = items %v seq %d real %d, want items %v seq %d real %d",
						i, c.Items, c.Seq, c.RealTokens, w.items, w.seq, w.real)
				}
				if c.PaddedTokens() != c.Batch()*c.Seq {
					t.Errorf("chunk %d padded %d != %d*%d", i, c.PaddedTokens(), c.Batch(), c.Seq)
				}
			}
		})
	}
}

// TestPackInvariants checks on random inputs that every item lands in
// exactly one chunk, that no chunk pads beyond the tier of its longest text,
// and that the budgets hold.
func TestPackInvariants(t *testing.T) {
	cfg := Config{MaxTokens: 16384, MaxBatch: 64, Tiers: Tiers(8, 8192, 4), Cost: Cost{A: 1, Bq: 0.01}, MaxCost: 40000}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 50; round++ {
		lengths := lognormalLengths(r, 1+r.IntN(500))
		seen := make([]int, len(lengths))
		for _, c := range p.Pack(lengths) {
			longest, real := 0, 0
			for _, it := range c.Items {
				seen[it]++
				longest = max(longest, lengths[it])
				real += lengths[it]
			}
			if c.Seq != cfg.Tier(longest) || real != c.RealTokens {
				t.Fatalf("chunk seq %d real %d, longest %d (tier %d) real %d", c.Seq, c.RealTokens, longest, cfg.Tier(longest), real)
			}
			if c.Batch() > 1 && (c.PaddedTokens() > cfg.MaxTokens || c.Batch() > cfg.MaxBatch || cfg.Cost.Of(c.Batch(), c.Seq) > cfg.MaxCost) {
				t.Fatalf("chunk %dx%d over budget", c.Batch(), c.Seq)
			}
		}
		for i, n := range seen {
			if n != 1 {
				t.Fatalf("item %d packed %d times", i, n)
			}
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
