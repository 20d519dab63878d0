package engine

import (
	"testing"
)

// TestChunksAnchorTenantsInTurn: tenant a queued a long backlog, then
// tenant b one text: b's text anchors the second chunk (a had the first),
// not the chunk after a's backlog, even beyond the forming window; with
// weights 3:1 a anchors three chunks for each of b's while both wait; one
// tenant alone runs in arrival order.
func TestChunksAnchorTenantsInTurn(t *testing.T) {
	newTestSched := func(weights map[string]int) *sched {
		cost := newCostModelFor(small, AttentionFused, PrecisionFP32)
		s := newSched(Config{MaxBatch: 1, MaxBatchTokens: 1 << 20, Sessions: 1}, cost, func(int) bool { return false })
		s.learn = false
		s.window = 8
		a := newAdmission(Config{TenantWeights: weights})
		s.weight = a.weight
		return s
	}
	enqueue := func(s *sched, tenant string, n int) *call {
		c := &call{class: bulk, tenant: tenant, done: make(chan chunkDone, n)}
		items, lengths := make([]int, n), make([]int, n)
		for i := range items {
			items[i], lengths[i] = i, 10
		}
		if err := s.enqueue(c, items, lengths); err != nil {
			t.Fatal(err)
		}
		return c
	}
	order := func(s *sched, n int) []string {
		var got []string
		for range n {
			w := s.next(0)
			got = append(got, w.rows[0].c.tenant)
			s.finished(w)
		}
		return got
	}

	s := newTestSched(nil)
	enqueue(s, "a", 40)
	enqueue(s, "b", 1)
	if got := order(s, 3); got[0] != "a" || got[1] != "b" || got[2] != "a" {
		t.Errorf("chunks anchored by %v, want a, b, a", got)
	}
	s.close()

	s = newTestSched(map[string]int{"a": 3})
	enqueue(s, "a", 40)
	enqueue(s, "b", 40)
	got := order(s, 40)
	na := 0
	for _, x := range got {
		if x == "a" {
			na++
		}
	}
	if na != 30 {
		t.Errorf("a anchored %d of 40 chunks, want 30 (weight 3 against 1): %v", na, got)
	}
	s.close()

	// One tenant: arrival order (the items of one call in order).
	s = newTestSched(nil)
	c := enqueue(s, "a", 5)
	for i := range 5 {
		w := s.next(0)
		if w.rows[0].c != c || w.rows[0].item != i {
			t.Errorf("chunk %d holds item %d", i, w.rows[0].item)
		}
		s.finished(w)
	}
	if len(s.queued[bulk]) != 0 || len(s.served[bulk]) != 0 {
		t.Errorf("tenant books not emptied: %v %v", s.queued[bulk], s.served[bulk])
	}
	s.close()
}
