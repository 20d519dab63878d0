package tokenizer

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// referenceWordPiece is HF's models/wordpiece tokenize transcribed as
// literally as Go allows: for each start, try the rest of the word, then ever
// shorter candidates one character at a time, each looked up in the map. The
// model's one-pass trie walk must agree with it on every valid word.
func referenceWordPiece(w *wordPiece, word string) []int32 {
	if utf8.RuneCountInString(word) > w.maxInputChars {
		return []int32{w.unkID}
	}
	var out []int32
	for start := 0; start < len(word); {
		end, found := len(word), false
		for start < end {
			sub := word[start:end]
			if start > 0 {
				sub = w.prefix + sub
			}
			if id, ok := w.vocab[sub]; ok {
				out = append(out, id)
				found = true
				break
			}
			_, size := utf8.DecodeLastRuneInString(word[start:end])
			end -= size
		}
		if !found {
			return []int32{w.unkID}
		}
		start = end
	}
	return out
}

func bertWordPiece(t testing.TB) *wordPiece {
	t.Helper()
	tok, err := Load(filepath.Join(tokenizersDir, "bert-base-uncased.json"))
	if err != nil {
		t.Fatal(err)
	}
	return tok.model.(*wordPiece)
}

// TestWordPieceMatchesReference runs every word of the parity corpus (as
// bert-base-uncased normalizes and pre-tokenizes it, and also raw
// whitespace-split) through both implementations.
func TestWordPieceMatchesReference(t *testing.T) {
	w := bertWordPiece(t)
	norm := bertNormalizer{cleanText: true, handleChineseChars: true, stripAccents: true, lowercase: true}
	var words []string
	for _, s := range parityCorpus(t) {
		words = bertPreTokenizer{}.preTokenize(words, norm.normalize(s))
		words = append(words, strings.Fields(s)...)
	}
	checked := 0
	for _, word := range words {
		if !utf8.ValidString(word) {
			continue
		}
		got, want := w.tokenize(nil, word), referenceWordPiece(w, word)
		if !slices.Equal(got, want) {
			t.Errorf("tokenize(%q) = %v, reference %v", word, got, want)
		}
		checked++
	}
	if checked < 10000 {
		t.Fatalf("only %d words checked", checked)
	}
}

func FuzzWordPiece(f *testing.F) {
	for _, s := range []string{"unaffable", "hello", "straße", "日本語", "##ing", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "", "💩", "e\u0301"} {
		f.Add(s)
	}
	w := bertWordPiece(f)
	f.Fuzz(func(t *testing.T, word string) {
		if !utf8.ValidString(word) {
			t.Skip("HF words are valid UTF-8")
		}
		if got, want := w.tokenize(nil, word), referenceWordPiece(w, word); !slices.Equal(got, want) {
			t.Errorf("tokenize(%q) = %v, reference %v", word, got, want)
		}
	})
}
