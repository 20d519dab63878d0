package heads

import (
	"errors"
	"math"
	"slices"
	"testing"
)

func near(a, b []float32, tol float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(float64(a[i]-b[i])) > tol {
			return false
		}
	}
	return true
}

func TestDense(t *testing.T) {
	got := Dense([]float32{9}, []float32{3, 4})
	if want := []float32{9, 0.6, 0.8}; !near(got, want, 1e-7) {
		t.Errorf("Dense = %v, want %v (appended after the existing 9)", got, want)
	}
	if got := Dense(nil, []float32{0, 0}); !near(got, []float32{0, 0}, 0) {
		t.Errorf("Dense of zero = %v, want zeros", got)
	}
}

func TestSparse(t *testing.T) {
	s := Sparser{Special: Special{0, 1, 2, 3}}
	tests := []struct {
		name    string
		tokens  []int32
		weights []float32
		ids     []uint32
		ws      []float32
	}{
		{"specials dropped", []int32{0, 10, 2}, []float32{5, 0.5, 5}, []uint32{10}, []float32{0.5}},
		{"max per id", []int32{0, 7, 7, 7, 2}, []float32{1, 0.2, 0.9, 0.4, 1}, []uint32{7}, []float32{0.9}},
		{"weights <= 0 dropped", []int32{0, 5, 6, 2}, []float32{1, 0, -1, 1}, nil, nil},
		{"sorted by id", []int32{0, 30, 4, 20, 2}, []float32{1, 0.3, 0.1, 0.2, 1}, []uint32{4, 20, 30}, []float32{0.1, 0.2, 0.3}},
		{"unk dropped", []int32{3, 8}, []float32{1, 1}, []uint32{8}, []float32{1}},
		// Masked positions are never passed: only the text's real tokens
		// (len(weights)) count, whatever follows in tokens.
		{"only real positions", []int32{0, 9, 2, 11}, []float32{1, 0.7, 1}, []uint32{9}, []float32{0.7}},
	}
	for _, tt := range tests {
		ids, ws := s.Sparse(nil, nil, tt.tokens, tt.weights)
		if !slices.Equal(ids, tt.ids) || !near(ws, tt.ws, 0) {
			t.Errorf("%s: Sparse = %v %v, want %v %v", tt.name, ids, ws, tt.ids, tt.ws)
		}
	}
}

// weights is a hand-checkable head: Dim 2, ColBERTDim 2.
func weights() *Weights {
	return &Weights{
		Dim:        2,
		SparseW:    []float32{1, -1},
		SparseBias: 0.5,
		ColBERTDim: 2,
		ColBERTW:   []float32{1, 0, 0, 2}, // c0 = h0, c1 = 2*h1
		ColBERTB:   []float32{0, 1},
	}
}

func TestTokenWeights(t *testing.T) {
	// rows: (2,1) -> 1.5; (0,3) -> relu(-2.5) = 0; (1,1) -> 0.5
	got := weights().TokenWeights(nil, []float32{2, 1, 0, 3, 1, 1})
	if want := []float32{1.5, 0, 0.5}; !near(got, want, 1e-7) {
		t.Errorf("TokenWeights = %v, want %v", got, want)
	}
}

func TestColBERT(t *testing.T) {
	// (3, 1.5) -> (3, 4) -> (0.6, 0.8); (0, -0.5) -> (0, 0) stays zero.
	got := weights().ColBERT(nil, []float32{3, 1.5, 0, -0.5})
	if want := []float32{0.6, 0.8, 0, 0}; !near(got, want, 1e-7) {
		t.Errorf("ColBERT = %v, want %v", got, want)
	}
	got = ColBERTRows(nil, []float32{3, 4, 0, 2}, 2)
	if want := []float32{0.6, 0.8, 0, 1}; !near(got, want, 1e-7) {
		t.Errorf("ColBERTRows = %v, want %v", got, want)
	}
}

func TestUnitNorms(t *testing.T) {
	w := &Weights{Dim: 5, SparseW: make([]float32, 5), ColBERTDim: 3, ColBERTW: make([]float32, 15), ColBERTB: []float32{0.1, -0.2, 0.3}}
	for i := range w.ColBERTW {
		w.ColBERTW[i] = float32(i%7) - 3
	}
	hidden := []float32{1, 2, 3, 4, 5, -1, 0.5, 2, -3, 1}
	rows := w.ColBERT(nil, hidden)
	if len(rows) != 2*3 {
		t.Fatalf("got %d values, want 2 rows of 3", len(rows))
	}
	for r := 0; r < 2; r++ {
		var ss float64
		for _, x := range rows[r*3 : r*3+3] {
			ss += float64(x) * float64(x)
		}
		if math.Abs(ss-1) > 1e-6 {
			t.Errorf("row %d norm^2 = %v, want 1", r, ss)
		}
	}
}

func TestValidate(t *testing.T) {
	if err := weights().Validate(); err != nil {
		t.Fatal(err)
	}
	w := weights()
	w.ColBERTB = w.ColBERTB[:1]
	if err := w.Validate(); !errors.Is(err, ErrShape) {
		t.Errorf("short bias: err %v, want ErrShape", err)
	}
	w = weights()
	w.SparseW = nil
	if err := w.Validate(); !errors.Is(err, ErrShape) {
		t.Errorf("no sparse weight: err %v, want ErrShape", err)
	}
}

func BenchmarkHeads(b *testing.B) {
	const dim, tokens = 1024, 256
	w := &Weights{Dim: dim, SparseW: make([]float32, dim), ColBERTDim: dim, ColBERTW: make([]float32, dim*dim), ColBERTB: make([]float32, dim)}
	hidden := make([]float32, tokens*dim)
	for i := range hidden {
		hidden[i] = float32(i%13) - 6
	}
	toks := make([]int32, tokens)
	for i := range toks {
		toks[i] = int32(i * 7 % 500)
	}
	s := Sparser{Special: Special{0, 1, 2, 3}}
	var tw, col []float32
	var ids []uint32
	var ws []float32
	b.ReportAllocs()
	for b.Loop() {
		tw = w.TokenWeights(tw[:0], hidden)
		ids, ws = s.Sparse(ids[:0], ws[:0], toks, tw)
		col = w.ColBERT(col[:0], hidden[dim:])
	}
	b.ReportMetric(float64(tokens*b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// TestColBERTBlocked checks rows computed together against the same rows
// one at a time, so no row's result depends on its neighbours.
func TestColBERTBlocked(t *testing.T) {
	w := &Weights{Dim: 6, SparseW: make([]float32, 6), ColBERTDim: 3, ColBERTW: make([]float32, 18), ColBERTB: []float32{0.5, -1, 2}}
	for i := range w.ColBERTW {
		w.ColBERTW[i] = float32(i%5) - 2.5
	}
	for rows := 0; rows <= 9; rows++ {
		hidden := make([]float32, rows*6)
		for i := range hidden {
			hidden[i] = float32((i*7)%11) - 5
		}
		got := w.ColBERT(nil, hidden)
		var want []float32
		for r := 0; r < rows; r++ {
			one := w.ColBERT(nil, hidden[r*6:(r+1)*6])
			want = append(want, one...)
		}
		if !near(got, want, 1e-6) {
			t.Errorf("%d rows: blocked %v, one by one %v", rows, got, want)
		}
	}
}
