package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// ErrMissingUnkToken is returned when a WordPiece vocabulary lacks its
// unk_token, which HF needs to encode any word it cannot split.
var ErrMissingUnkToken = errors.New("wordpiece unk_token not in vocabulary")

// wordPiece is HF's models.WordPiece: greedy longest-match-first splitting
// of a word into vocabulary pieces, the pieces after the first carrying the
// continuing-subword prefix; a word with any unmatched rest, or longer than
// maxInputChars characters, is the single unk token.
type wordPiece struct {
	vocab         map[string]int32
	tokens        []string // by id; "" where the vocabulary has a gap
	unkID         int32
	prefix        string
	maxInputChars int
	// trie holds the whole vocabulary; continued pieces are looked up from
	// prefixNode, the node the prefix leads to (the root when it is ""), and
	// cannot match at all when no entry starts with the prefix.
	trie           *pieceTrie
	entryIDs       []int32 // id of each trie entry
	prefixNode     uint32
	noContinuation bool
}

func init() {
	registerModel("WordPiece", newWordPiece)
}

func newWordPiece(raw json.RawMessage) (model, error) {
	cfg := struct {
		Vocab                   map[string]int32 `json:"vocab"`
		UnkToken                *string          `json:"unk_token"`
		ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
		MaxInputCharsPerWord    *int             `json:"max_input_chars_per_word"`
	}{}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("WordPiece: %w", err)
	}
	unk, prefix, maxChars := "[UNK]", "##", 100
	if cfg.UnkToken != nil {
		unk = *cfg.UnkToken
	}
	if cfg.ContinuingSubwordPrefix != nil {
		prefix = *cfg.ContinuingSubwordPrefix
	}
	if cfg.MaxInputCharsPerWord != nil {
		maxChars = *cfg.MaxInputCharsPerWord
	}
	return newWordPieceModel(cfg.Vocab, unk, prefix, maxChars)
}

// newWordPieceModel builds the model from a decoded vocabulary.
func newWordPieceModel(vocab map[string]int32, unk, prefix string, maxInputChars int) (*wordPiece, error) {
	unkID, ok := vocab[unk]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrMissingUnkToken, unk)
	}
	w := &wordPiece{
		vocab:         vocab,
		unkID:         unkID,
		prefix:        prefix,
		maxInputChars: maxInputChars,
	}
	maxID := int32(-1)
	for tok, id := range vocab {
		if id < 0 {
			return nil, fmt.Errorf("WordPiece: negative id %d for %q", id, tok)
		}
		maxID = max(maxID, id)
	}
	w.tokens = make([]string, maxID+1)
	for tok, id := range vocab {
		w.tokens[id] = tok
	}
	// The trie indexes entries, not ids: two entries may share an id.
	entries := make([]string, 0, len(vocab))
	for tok, id := range vocab {
		entries = append(entries, tok)
		w.entryIDs = append(w.entryIDs, id)
	}
	w.trie = newPieceTrie(entries)
	for i := 0; i < len(prefix) && !w.noContinuation; i++ {
		w.prefixNode = w.trie.child(w.prefixNode, prefix[i])
		w.noContinuation = w.prefixNode == 0
	}
	return w, nil
}

func (w *wordPiece) tokenize(dst []int32, word string) []int32 {
	if w.maxInputChars >= 0 && len(word) > w.maxInputChars && utf8.RuneCountInString(word) > w.maxInputChars {
		return append(dst, w.unkID)
	}
	mark := len(dst)
	for start := 0; start < len(word); {
		node := uint32(0)
		if start > 0 {
			if w.noContinuation {
				return append(dst[:mark], w.unkID)
			}
			node = w.prefixNode
		}
		id, end := w.longestMatch(node, word, start)
		if end == start {
			return append(dst[:mark], w.unkID)
		}
		dst = append(dst, id)
		start = end
	}
	return dst
}

// longestMatch walks the trie from node along word[start:] and returns the
// id and end of the longest vocabulary piece found: what HF finds by trying
// ever shorter candidates from the end of the word, in one pass. It returns
// end == start when nothing matches.
func (w *wordPiece) longestMatch(node uint32, word string, start int) (id int32, end int) {
	end = start
	for i := start; i < len(word); i++ {
		if node = w.trie.child(node, word[i]); node == 0 {
			break
		}
		// HF only ends pieces on character boundaries; a vocabulary entry
		// is valid UTF-8, so this only matters for invalid input.
		if v := w.trie.value[node]; v >= 0 && (i+1 == len(word) || utf8.RuneStart(word[i+1])) {
			id, end = w.entryIDs[v], i+1
		}
	}
	return id, end
}

func (w *wordPiece) tokenToID(tok string) (int32, bool) {
	id, ok := w.vocab[tok]
	return id, ok
}

func (w *wordPiece) idToToken(id int32) (string, bool) {
	if id < 0 || int(id) >= len(w.tokens) || w.tokens[id] == "" {
		return "", false
	}
	return w.tokens[id], true
}

func (w *wordPiece) vocabSize() int { return len(w.vocab) }
