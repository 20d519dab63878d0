package tokenizer

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// testWordPiece is a small vocabulary whose ids are easy to read: the greedy
// choices below are worked out by hand from HF's models/wordpiece tokenize.
func testWordPiece(t testing.TB, maxChars int) *wordPiece {
	t.Helper()
	vocab := map[string]int32{
		"[UNK]": 0, "un": 1, "##aff": 2, "##able": 3, "unaffable": 4,
		"a": 5, "##a": 6, "aa": 7, "##aa": 8, "é": 9, "##é": 10, "x": 11,
		"##b": 12, "ab": 13, "日": 14, "##本": 15, "unable": 16, "##x": 17,
	}
	w, err := newWordPieceModel(vocab, "[UNK]", "##", maxChars)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestWordPieceTokenize(t *testing.T) {
	w := testWordPiece(t, 100)
	// Exactly the limit is still split: aa, then 49 ##aa.
	hundred := append([]int32{7}, slices.Repeat([]int32{8}, 49)...)
	for _, tc := range []struct {
		word string
		want []int32
	}{
		{"unaffable", []int32{4}},       // the whole word beats un ##aff ##able
		{"unaffableaff", []int32{4, 2}}, // longest first, then continue
		{"unable", []int32{16}},         //
		{"unablex", []int32{16, 17}},    //
		{"aaaaa", []int32{7, 8, 6}},     // aa ##aa ##a
		{"ab", []int32{13}},             //
		{"abb", []int32{13, 12}},        //
		{"aé", []int32{5, 10}},          // multi-byte continuation
		{"éé", []int32{9, 10}},          //
		{"日本", []int32{14, 15}},         //
		{"本", []int32{0}},               // only the continuation form exists
		{"unaffablez", []int32{0}},      // one unmatched rest makes the whole word unk
		{"xq", []int32{0}},              //
		{"", nil},                       // HF returns no tokens for an empty word
		{"q", []int32{0}},               //
		{strings.Repeat("a", 100), hundred},
		{strings.Repeat("a", 101), []int32{0}},
		{strings.Repeat("é", 101), []int32{0}}, // the limit counts characters, not bytes
	} {
		if got := w.tokenize(nil, tc.word); !slices.Equal(got, tc.want) {
			t.Errorf("tokenize(%q) = %v, want %v", tc.word, got, tc.want)
		}
	}
}

func TestWordPieceCharLimitIsCharacters(t *testing.T) {
	w := testWordPiece(t, 4)
	// Four two-byte characters: eight bytes but within a 4-character limit.
	if got, want := w.tokenize(nil, "éééé"), []int32{9, 10, 10, 10}; !slices.Equal(got, want) {
		t.Errorf("éééé = %v, want %v", got, want)
	}
	if got, want := w.tokenize(nil, "ééééé"), []int32{0}; !slices.Equal(got, want) {
		t.Errorf("ééééé = %v, want %v", got, want)
	}
}

func TestWordPieceAppendsAndRollsBack(t *testing.T) {
	w := testWordPiece(t, 100)
	dst := []int32{99}
	dst = w.tokenize(dst, "aa")
	// "abz" matches ab first, then fails on z: the partial ab must go.
	dst = w.tokenize(dst, "abz")
	if want := []int32{99, 7, 0}; !slices.Equal(dst, want) {
		t.Errorf("got %v, want %v", dst, want)
	}
}

func TestWordPieceVocab(t *testing.T) {
	w := testWordPiece(t, 100)
	if id, ok := w.tokenToID("##able"); !ok || id != 3 {
		t.Errorf("tokenToID(##able) = %d, %v", id, ok)
	}
	if tok, ok := w.idToToken(15); !ok || tok != "##本" {
		t.Errorf("idToToken(15) = %q, %v", tok, ok)
	}
	for _, id := range []int32{-1, 18, 1000} {
		if tok, ok := w.idToToken(id); ok {
			t.Errorf("idToToken(%d) = %q, want none", id, tok)
		}
	}
	if got := w.vocabSize(); got != 18 {
		t.Errorf("vocabSize = %d, want 18", got)
	}
}

func TestWordPieceConfig(t *testing.T) {
	m, err := newWordPiece([]byte(`{"type":"WordPiece","vocab":{"<unk>":0,"ab":1,"@@c":2},"unk_token":"<unk>","continuing_subword_prefix":"@@","max_input_chars_per_word":3}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.tokenize(nil, "abc"), []int32{1, 2}; !slices.Equal(got, want) {
		t.Errorf("abc = %v, want %v", got, want)
	}
	if got, want := m.tokenize(nil, "abcc"), []int32{0}; !slices.Equal(got, want) {
		t.Errorf("abcc (over the limit) = %v, want %v", got, want)
	}
	// Defaults: [UNK], ## and 100 characters.
	m, err = newWordPiece([]byte(`{"vocab":{"[UNK]":7,"a":1,"##b":2}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.tokenize(nil, "ab"), []int32{1, 2}; !slices.Equal(got, want) {
		t.Errorf("ab = %v, want %v", got, want)
	}
	if got, want := m.tokenize(nil, strings.Repeat("b", 101)), []int32{7}; !slices.Equal(got, want) {
		t.Errorf("101 chars = %v, want %v", got, want)
	}
	if _, err := newWordPiece([]byte(`{"vocab":{"a":0}}`)); !errors.Is(err, ErrMissingUnkToken) {
		t.Errorf("missing unk: err = %v, want ErrMissingUnkToken", err)
	}
	if _, err := newWordPiece([]byte(`{"vocab":[1,2]}`)); err == nil {
		t.Error("a list vocabulary loaded")
	}
}

// TestWordPieceLongWords checks that the one-pass trie walk finds what HF's
// shrinking-candidate search finds on words much longer than any piece.
func TestWordPieceLongWords(t *testing.T) {
	w := testWordPiece(t, 1000)
	word := strings.Repeat("é", 30) + "日本"
	got := w.tokenize(nil, word)
	if len(got) != 1 || got[0] != 0 {
		// 日 is not a continuation piece, so HF gives unk for the word.
		t.Errorf("got %v, want [0]", got)
	}
	word = "un" + strings.Repeat("aff", 40) + "able"
	want := append([]int32{1}, slices.Repeat([]int32{2}, 40)...)
	want = append(want, 3)
	if got := w.tokenize(nil, word); !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestWordPieceSharedID(t *testing.T) {
	// Two entries with one id: both must match, as in HF's map lookups.
	w, err := newWordPieceModel(map[string]int32{"[UNK]": 0, "ab": 1, "ba": 1, "##c": 2}, "[UNK]", "##", 100)
	if err != nil {
		t.Fatal(err)
	}
	for word, want := range map[string][]int32{"ab": {1}, "ba": {1}, "bac": {1, 2}} {
		if got := w.tokenize(nil, word); !slices.Equal(got, want) {
			t.Errorf("%s = %v, want %v", word, got, want)
		}
	}
}

func TestWordPieceNoContinuations(t *testing.T) {
	// Without any "##" entry nothing can follow the first piece.
	w, err := newWordPieceModel(map[string]int32{"[UNK]": 0, "ab": 1, "c": 2}, "[UNK]", "##", 100)
	if err != nil {
		t.Fatal(err)
	}
	for word, want := range map[string][]int32{"ab": {1}, "c": {2}, "abc": {0}} {
		if got := w.tokenize(nil, word); !slices.Equal(got, want) {
			t.Errorf("%s = %v, want %v", word, got, want)
		}
	}
}
