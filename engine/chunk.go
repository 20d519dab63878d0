package engine

import (
	"slices"

	"github.com/jetembed/jetembed/schema"
)

// How the scheduler forms a chunk: the anchor text, the texts that join it
// while the modelled cost per real token falls, and the budgets a chunk
// must stay within.

// minGain is how much a row must lower the modelled cost per real token
// to join a chunk whose workspace would exceed bigChunk bytes: 1%. Long
// texts, whose run time dwarfs a run's fixed cost, then run alone
// (batching them buys nothing and multiplies the workspace); small chunks
// grow while the cost per token does not rise.
const (
	minGain  = 0.99
	bigChunk = 256 << 20
)

// gain is the factor the cost per real token must fall by for a rows x seq
// chunk.
func (s *sched) gain(rows, seq int) float64 {
	if s.cost.bytes(rows, seq) > bigChunk {
		return minGain
	}
	return 1
}

// window bounds how many of a class's oldest texts a chunk is chosen
// from, so forming a chunk stays cheap under a deep backlog.
const window = 512

// pad is the padded length of a chunk whose longest text has n tokens.
func (s *sched) pad(n int) int {
	if s.tiers == nil {
		return n
	}
	i, _ := slices.BinarySearch(s.tiers, n)
	if i == len(s.tiers) {
		return n
	}
	return s.tiers[i]
}

// tier rounds n up to a configured tier (n beyond the last).
func (s *sched) tier(n int) int {
	i, _ := slices.BinarySearch(s.allTiers, n)
	if i == len(s.allTiers) {
		return n
	}
	return s.allTiers[i]
}

// form takes the next chunk of class cl off the queue. Its anchor is the
// class's oldest text, so calls finish in arrival order; it grows with the
// texts nearest in length (in a length-sorted window of the oldest texts)
// while the modelled cost per real token does not rise and the chunk
// stays within the batch, token, memory and (bulk) latency budgets. On a
// CPU, where a run's fixed cost is small, that is often batch 1 for long
// texts and larger batches of similar short ones.
func (s *sched) form(cl class) *work {
	q := s.queue[cl]
	win := q[:min(len(q), s.window)]
	order := s.scratch[:0]
	for i := range win {
		order = append(order, i)
	}
	// Longest first; ties oldest first.
	slices.SortStableFunc(order, func(a, b int) int { return win[b].n - win[a].n })
	anchor := slices.Index(order, 0)
	lo, hi := anchor, anchor
	seq := s.pad(win[0].n)
	real := win[0].n
	if s.refused(seq) {
		// Refused alone: no other text shares the refusal.
		w := &work{seq: seq, cl: cl, err: schema.Errorf(schema.CodeShapeNotWarmed, "chunk 1x%d is above the warmed ceiling", seq)}
		s.take(cl, order[anchor:anchor+1], w)
		s.scratch = order
		return w
	}
	for {
		rows := hi - lo + 1
		cur := s.cost.seconds(rows, seq) / float64(real)
		bestSide, bestScore, bestSeq := 0, cur, seq
		if hi+1 < len(order) {
			n := win[order[hi+1]].n
			if sc := s.cost.seconds(rows+1, seq) / float64(real+n); sc <= bestScore*s.gain(rows+1, seq) && s.fits(cl, rows+1, seq) {
				bestSide, bestScore = 1, sc
			}
		}
		// A longer text whose padding the guard refuses never joins.
		if lo > 0 && !s.refused(s.pad(win[order[lo-1]].n)) {
			n := win[order[lo-1]].n
			sq := s.pad(n)
			if sc := s.cost.seconds(rows+1, sq) / float64(real+n); sc < min(bestScore, cur*s.gain(rows+1, sq)) && s.fits(cl, rows+1, sq) {
				bestSide, bestScore, bestSeq = -1, sc, sq
			}
		}
		switch bestSide {
		case 1:
			hi++
			real += win[order[hi]].n
		case -1:
			lo--
			real += win[order[lo]].n
			seq = bestSeq
		default:
			w := &work{seq: seq, cl: cl}
			s.take(cl, order[lo:hi+1], w)
			s.scratch = order
			return w
		}
	}
}

// fits reports whether a rows x seq chunk of class cl stays within the
// budgets. One text always fits: New cut MaxTokens to what the memory
// budget holds.
func (s *sched) fits(cl class, rows, seq int) bool {
	switch {
	case rows > s.maxBatch || rows*seq > s.maxToks:
		return false
	case s.memory > 0 && s.cost.bytes(rows, seq) > float64(s.memory):
		return false
	case cl == bulk && s.maxCost > 0 && s.cost.seconds(rows, seq) > s.maxCost:
		return false
	}
	return true
}

// take moves the window entries at idx (longest first) into w.rows and
// deletes them from the queue, keeping the others in arrival order.
func (s *sched) take(cl class, idx []int, w *work) {
	q := s.queue[cl]
	if cap(s.selected) < len(q) {
		s.selected = make([]bool, len(q))
	}
	sel := s.selected[:len(q)]
	for _, i := range idx {
		w.rows = append(w.rows, q[i])
		sel[i] = true
	}
	k := 0
	for i, e := range q {
		if !sel[i] {
			q[k] = e
			k++
		}
		sel[i] = false
	}
	clear(q[k:])
	s.queue[cl] = q[:k]
	if cl == bulk {
		s.bulkSince = s.now()
	}
}
