package heads

import "slices"

// Sparser turns per-token weights into a sparse vector. It keeps a scratch
// buffer between calls, so one Sparser serves one goroutine.
type Sparser struct {
	Special Special
	pairs   []pair
}

type pair struct {
	id int32
	w  float32
}

// Sparse appends the sparse vector of one text to ids and weights: for
// token ids (the text's real tokens) with per-position weights, the max
// weight per id, special ids and weights <= 0 dropped, sorted by id.
func (s *Sparser) Sparse(ids []uint32, weights []float32, tokens []int32, tokenWeights []float32) ([]uint32, []float32) {
	s.pairs = s.pairs[:0]
	for i, id := range tokens[:len(tokenWeights)] {
		// Dropping non-positive weights before taking the max per id is
		// the same as after: a max <= 0 means every weight was <= 0.
		if w := tokenWeights[i]; w > 0 && !s.Special.Has(id) {
			s.pairs = append(s.pairs, pair{id, w})
		}
	}
	slices.SortFunc(s.pairs, func(a, b pair) int { return int(a.id) - int(b.id) })
	for i, p := range s.pairs {
		if i > 0 && p.id == s.pairs[i-1].id {
			weights[len(weights)-1] = max(weights[len(weights)-1], p.w)
			continue
		}
		ids = append(ids, uint32(p.id))
		weights = append(weights, p.w)
	}
	return ids, weights
}
