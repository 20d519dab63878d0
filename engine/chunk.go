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
// oldest text of the tenant whose turn it is (anchorIndex: the least
// served, so one tenant's backlog does not run ahead of another's text;
// with one tenant, the class's oldest text), so each tenant's calls finish
// in arrival order; it grows with the texts nearest in length (in a
// length-sorted window of the oldest texts, the anchor included) while
// the modelled cost per real token does not rise and the chunk stays
// within the batch, token, memory and (bulk) latency budgets. On a CPU,
// where a run's fixed cost is small, that is often batch 1 for long texts
// and larger batches of similar short ones.
func (s *sched) form(cl class) *work {
	q := s.queue[cl]
	ai := s.anchorIndex(cl)
	// The window: the oldest texts, and the anchor where it is older
	// than the window's end. idx maps a window position to the queue.
	idx := s.idxBuf[:0]
	for i := range min(len(q), s.window) {
		idx = append(idx, i)
	}
	if ai >= len(idx) {
		idx[len(idx)-1] = ai
	}
	win := s.winBuf[:0]
	for _, i := range idx {
		win = append(win, q[i])
	}
	s.idxBuf, s.winBuf = idx, win
	at := slices.Index(idx, ai)
	order := s.scratch[:0]
	for i := range win {
		order = append(order, i)
	}
	// Longest first; ties oldest first.
	slices.SortStableFunc(order, func(a, b int) int { return win[b].n - win[a].n })
	anchor := slices.Index(order, at)
	lo, hi := anchor, anchor
	seq := s.pad(win[at].n)
	real := win[at].n
	if s.refused(seq) {
		// Refused alone: no other text shares the refusal.
		w := &work{seq: seq, cl: cl, err: schema.Errorf(schema.CodeShapeNotWarmed, "chunk 1x%d is above the warmed ceiling", seq)}
		s.take(cl, idx, order[anchor:anchor+1], w)
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
			s.take(cl, idx, order[lo:hi+1], w)
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

// take moves the window entries at positions pos (longest first; idx
// maps them to the queue) into w.rows, deletes them from the queue,
// keeping the others in arrival order, and counts them to their tenants.
func (s *sched) take(cl class, idx, pos []int, w *work) {
	q := s.queue[cl]
	if cap(s.selected) < len(q) {
		s.selected = make([]bool, len(q))
	}
	sel := s.selected[:len(q)]
	for _, p := range pos {
		i := idx[p]
		w.rows = append(w.rows, q[i])
		sel[i] = true
		if w.err == nil {
			s.left(cl, q[i].c.tenant, q[i].n)
		} else {
			s.left(cl, q[i].c.tenant, 0)
		}
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
	clear(s.winBuf)
	s.queue[cl] = q[:k]
	if cl == bulk {
		s.bulkSince = s.now()
	}
}
