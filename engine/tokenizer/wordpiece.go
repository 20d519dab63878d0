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
	// maxTokenLen is the longest vocabulary entry in bytes without the
	// prefix: no match can be longer, so the search starts there instead of
	// at the end of a long word.
	maxTokenLen int
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
		n := len(tok)
		if prefix != "" && len(tok) >= len(prefix) && tok[:len(prefix)] == prefix {
			n -= len(prefix)
		}
		w.maxTokenLen = max(w.maxTokenLen, len(tok), n)
	}
	w.tokens = make([]string, maxID+1)
	for tok, id := range vocab {
		w.tokens[id] = tok
	}
	return w, nil
}

func (w *wordPiece) tokenize(dst []int32, word string) []int32 {
	if w.maxInputChars >= 0 && len(word) > w.maxInputChars && utf8.RuneCountInString(word) > w.maxInputChars {
		return append(dst, w.unkID)
	}
	mark := len(dst)
	// scratch holds prefix+candidate for lookups; it stays on the stack,
	// keeping tokenize allocation-free and safe for concurrent use.
	var scratch [128]byte
	for start := 0; start < len(word); {
		end := len(word)
		if end-start > w.maxTokenLen {
			end = start + w.maxTokenLen
			for end > start && !utf8.RuneStart(word[end]) {
				end--
			}
		}
		found := false
		for end > start {
			id, ok := w.lookup(scratch[:0], word[start:end], start > 0)
			if ok {
				dst = append(dst, id)
				found = true
				break
			}
			_, size := utf8.DecodeLastRuneInString(word[start:end])
			end -= size
		}
		if !found {
			return append(dst[:mark], w.unkID)
		}
		start = end
	}
	return dst
}

// lookup finds piece, with the continuing-subword prefix if continued,
// building the prefixed key in buf.
func (w *wordPiece) lookup(buf []byte, piece string, continued bool) (int32, bool) {
	if !continued || w.prefix == "" {
		id, ok := w.vocab[piece]
		return id, ok
	}
	buf = append(append(buf, w.prefix...), piece...)
	id, ok := w.vocab[string(buf)]
	return id, ok
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
