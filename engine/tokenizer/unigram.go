package tokenizer

import (
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"unicode/utf8"
)

func init() {
	registerModel("Unigram", newUnigram)
}

// unkPenalty is how much worse than the worst piece an unknown character
// scores (HF: K_UNK_PENALTY).
const unkPenalty = 10.0

// unigram is HF's Unigram model: the Viterbi best segmentation of a word
// under the piece log-probabilities. Unknown characters score unkScore and
// runs of them fuse into one token (HF's fuse_unk is always on for Unigram);
// with byte_fallback an unknown run becomes its <0xXX> byte pieces.
type unigram struct {
	pieces   []string
	scores   []float64
	trie     *pieceTrie
	unkID    int32 // -1 when the model has none
	unkScore float64
	bytes    [256]int32 // id of <0xXX>, or -1; only with byte_fallback
	fallback bool
	lattices sync.Pool // *lattice
}

func newUnigram(raw json.RawMessage) (model, error) {
	var cfg struct {
		UnkID        *int                 `json:"unk_id"`
		Vocab        [][2]json.RawMessage `json:"vocab"`
		ByteFallback bool                 `json:"byte_fallback"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("unigram: %w", err)
	}
	pieces := make([]string, len(cfg.Vocab))
	scores := make([]float64, len(cfg.Vocab))
	for i, e := range cfg.Vocab {
		if err := json.Unmarshal(e[0], &pieces[i]); err != nil {
			return nil, fmt.Errorf("unigram: vocab[%d] piece: %w", i, err)
		}
		if err := json.Unmarshal(e[1], &scores[i]); err != nil {
			return nil, fmt.Errorf("unigram: vocab[%d] score: %w", i, err)
		}
	}
	unk := -1
	if cfg.UnkID != nil {
		unk = *cfg.UnkID
	}
	return newUnigramModel(pieces, scores, unk, cfg.ByteFallback)
}

func newUnigramModel(pieces []string, scores []float64, unk int, byteFallback bool) (*unigram, error) {
	if len(pieces) == 0 {
		return nil, fmt.Errorf("unigram: empty vocabulary")
	}
	if len(pieces) > math.MaxInt32 {
		return nil, fmt.Errorf("unigram: vocabulary of %d pieces is too large", len(pieces))
	}
	if unk >= len(pieces) || unk < -1 {
		return nil, fmt.Errorf("unigram: unk_id %d out of range (vocab %d)", unk, len(pieces))
	}
	u := &unigram{pieces: pieces, scores: scores, unkID: int32(unk), fallback: byteFallback}
	minScore := math.Inf(1)
	for _, s := range scores {
		minScore = min(minScore, s)
	}
	u.unkScore = minScore - unkPenalty
	u.trie = newPieceTrie(pieces)
	for b := range u.bytes {
		u.bytes[b] = -1
		if byteFallback {
			if id, ok := u.trie.lookup(fmt.Sprintf("<0x%02X>", b)); ok {
				u.bytes[b] = id
			}
		}
	}
	u.lattices.New = func() any { return new(lattice) }
	return u, nil
}

// latticeNode is the best path ending at one byte position of the word.
type latticeNode struct {
	score float64
	start int32 // -1 while no path reaches this position
	id    int32
}

type lattice struct {
	nodes []latticeNode
	back  []int32 // ids of the best path, last token first
}

func (u *unigram) tokenize(dst []int32, word string) []int32 {
	if word == "" {
		return dst
	}
	lat := u.lattices.Get().(*lattice)
	defer u.lattices.Put(lat)
	n := len(word)
	if cap(lat.nodes) < n+1 {
		lat.nodes = make([]latticeNode, n+1)
	}
	nodes := lat.nodes[:n+1]
	for i := range nodes {
		nodes[i] = latticeNode{start: -1}
	}
	nodes[0].start = 0

	u.forward(nodes, word)

	// Backtrack, fusing runs of unknown characters.
	back := lat.back[:0]
	unkEnd := -1
	for end := n; end > 0; {
		nd := nodes[end]
		start := int(nd.start)
		if start < 0 || start >= end {
			// Unreachable for valid UTF-8 pieces and words; a guard, not a path.
			break
		}
		if nd.id == u.unkID {
			if unkEnd < 0 {
				unkEnd = end
			}
		} else {
			if unkEnd >= 0 {
				back = u.appendUnknown(back, word[end:unkEnd])
				unkEnd = -1
			}
			back = append(back, nd.id)
		}
		end = start
	}
	if unkEnd >= 0 {
		back = u.appendUnknown(back, word[:unkEnd])
	}
	for i := len(back) - 1; i >= 0; i-- {
		if back[i] >= 0 {
			dst = append(dst, back[i])
		}
	}
	lat.back = back
	return dst
}

// forward fills nodes (len(word)+1, node 0 the start) with the best
// segmentation ending at every byte. HF's order: start positions
// ascending, candidate pieces shortest first, the unknown character last;
// a later candidate replaces a node only with a strictly better score,
// which is HF's tie-breaking.
func (u *unigram) forward(nodes []latticeNode, word string) {
	for start, n := 0, len(word); start < n; {
		base := nodes[start].score
		_, charLen := utf8.DecodeRuneInString(word[start:])
		single := false
		var node uint32
		for end := start; end < n; end++ {
			if node = u.trie.child(node, word[end]); node == 0 {
				break
			}
			id := u.trie.value[node]
			if id < 0 {
				continue
			}
			cand := base + u.scores[id]
			if t := &nodes[end+1]; t.start < 0 || cand > t.score {
				*t = latticeNode{score: cand, start: int32(start), id: id}
			}
			if end+1-start == charLen {
				single = true
			}
		}
		if !single {
			cand := base + u.unkScore
			if t := &nodes[start+charLen]; t.start < 0 || cand > t.score {
				*t = latticeNode{score: cand, start: int32(start), id: u.unkID}
			}
		}
		start += charLen
	}
}

// appendUnknown appends, reversed, the ids of a fused run of unknown
// characters: the run itself if it happens to be a piece, else its byte
// pieces with byte_fallback, else the unknown token (HF's Unigram.tokenize).
// Without an unknown token HF fails the whole encode; this drops the run.
func (u *unigram) appendUnknown(back []int32, run string) []int32 {
	if id, ok := u.trie.lookup(run); ok {
		return append(back, id)
	}
	if u.fallback {
		ok := true
		for i := 0; i < len(run) && ok; i++ {
			ok = u.bytes[run[i]] >= 0
		}
		if ok {
			for i := len(run) - 1; i >= 0; i-- {
				back = append(back, u.bytes[run[i]])
			}
			return back
		}
	}
	return append(back, u.unkID)
}

func (u *unigram) tokenToID(tok string) (int32, bool) { return u.trie.lookup(tok) }

func (u *unigram) idToToken(id int32) (string, bool) {
	if id < 0 || int(id) >= len(u.pieces) {
		return "", false
	}
	return u.pieces[id], true
}

func (u *unigram) vocabSize() int { return len(u.pieces) }
