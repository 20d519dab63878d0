package tokenizer

import (
	"sort"
)

// pieceTrie is a byte trie over a vocabulary, flattened into arrays in
// breadth-first order: the children of node n are the edges
// first[n]..first[n+1], sorted by label. The root's children are also kept in
// a direct table, since almost every lookup starts there and the root of a
// multilingual vocabulary has hundreds of children.
type pieceTrie struct {
	first   []uint32
	labels  []byte
	targets []uint32
	value   []int32 // the piece id ending at a node, or -1
	root    [256]uint32
}

// newPieceTrie builds the trie of pieces; the id of pieces[i] is i. For a
// piece listed twice the later id wins, as in HF's token-to-id map. Empty
// pieces are left out: HF never matches them.
func newPieceTrie(pieces []string) *pieceTrie {
	order := make([]int32, 0, len(pieces))
	for i, p := range pieces {
		if p != "" {
			order = append(order, int32(i))
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return pieces[order[a]] < pieces[order[b]] })
	keys := make([]string, 0, len(order))
	ids := make([]int32, 0, len(order))
	for _, id := range order {
		if n := len(keys); n > 0 && keys[n-1] == pieces[id] {
			ids[n-1] = id
			continue
		}
		keys = append(keys, pieces[id])
		ids = append(ids, id)
	}

	type keyRange struct{ lo, hi, depth int }
	t := &pieceTrie{}
	queue := []keyRange{{0, len(keys), 0}}
	for n := 0; n < len(queue); n++ {
		sp := queue[n]
		lo, val := sp.lo, int32(-1)
		if lo < sp.hi && len(keys[lo]) == sp.depth {
			val = ids[lo]
			lo++
		}
		t.value = append(t.value, val)
		t.first = append(t.first, uint32(len(t.labels)))
		for lo < sp.hi {
			c := keys[lo][sp.depth]
			hi := lo + 1
			for hi < sp.hi && keys[hi][sp.depth] == c {
				hi++
			}
			if n == 0 {
				t.root[c] = uint32(len(queue))
			}
			t.labels = append(t.labels, c)
			t.targets = append(t.targets, uint32(len(queue)))
			queue = append(queue, keyRange{lo, hi, sp.depth + 1})
			lo = hi
		}
	}
	t.first = append(t.first, uint32(len(t.labels)))
	return t
}

// child is the node below n along label c, or 0 (the root is never a child).
func (t *pieceTrie) child(n uint32, c byte) uint32 {
	if n == 0 {
		return t.root[c]
	}
	lo, hi := t.first[n], t.first[n+1]
	for hi-lo > 8 {
		mid := (lo + hi) / 2
		if t.labels[mid] < c {
			lo = mid + 1
		} else {
			hi = mid + 1 // keep mid: it may be c
		}
	}
	for ; lo < hi; lo++ {
		if t.labels[lo] == c {
			return t.targets[lo]
		}
		if t.labels[lo] > c {
			break
		}
	}
	return 0
}

// lookup is the id of exactly s.
func (t *pieceTrie) lookup(s string) (int32, bool) {
	var n uint32
	for i := 0; i < len(s); i++ {
		if n = t.child(n, s[i]); n == 0 {
			return 0, false
		}
	}
	if len(s) == 0 || t.value[n] < 0 {
		return 0, false
	}
	return t.value[n], true
}
