package tokenizer

import (
	"errors"
	"slices"
	"testing"
)

// preTokenizeCase is one input and the words HF gives for it (checked with
// the HF oracle's offsets).
type preTokenizeCase struct {
	in   string
	want []string
}

func checkPreTokenize(t *testing.T, p preTokenizer, cases []preTokenizeCase) {
	t.Helper()
	for _, tc := range cases {
		got := p.preTokenize(nil, tc.in)
		if len(got) == 0 && len(tc.want) == 0 {
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("preTokenize(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestPunctuationBehaviors(t *testing.T) {
	for _, tc := range []struct {
		behavior string
		cases    []preTokenizeCase
	}{
		{"Isolated", []preTokenizeCase{
			{".a..b.", []string{".", "a", ".", ".", "b", "."}},
			{"a..b", []string{"a", ".", ".", "b"}},
		}},
		{"Removed", []preTokenizeCase{
			{".a..b.", []string{"a", "b"}},
			{"..", nil},
		}},
		{"MergedWithPrevious", []preTokenizeCase{
			{".a..b.", []string{".", "a.", ".", "b."}},
			{"a..b", []string{"a.", ".", "b"}},
			{"..", []string{".", "."}},
		}},
		{"MergedWithNext", []preTokenizeCase{
			{".a..b.", []string{".a", ".", ".b", "."}},
			{"a..b", []string{"a", ".", ".b"}},
			{"..", []string{".", "."}},
		}},
		{"Contiguous", []preTokenizeCase{
			{".a..b.", []string{".", "a", "..", "b", "."}},
			{"a..b", []string{"a", "..", "b"}},
			{"..", []string{".."}},
		}},
	} {
		t.Run(tc.behavior, func(t *testing.T) {
			p, err := newPunctuationPreTokenizer([]byte(`{"type":"Punctuation","behavior":"` + tc.behavior + `"}`))
			if err != nil {
				t.Fatal(err)
			}
			checkPreTokenize(t, p, append(tc.cases, preTokenizeCase{"", nil}, preTokenizeCase{"abc", []string{"abc"}}))
		})
	}
}

func TestPunctuationConfig(t *testing.T) {
	p, err := newPunctuationPreTokenizer([]byte(`{"type":"Punctuation"}`))
	if err != nil {
		t.Fatal(err)
	}
	// Isolated by default; whitespace is not a delimiter here.
	checkPreTokenize(t, p, []preTokenizeCase{{"a b,c", []string{"a b", ",", "c"}}})
	if _, err := newPunctuationPreTokenizer([]byte(`{"behavior":"Sideways"}`)); !errors.Is(err, ErrUnsupported) {
		t.Errorf("unknown behavior: err = %v, want ErrUnsupported", err)
	}
}

func TestIsHFPunct(t *testing.T) {
	for _, tc := range []struct {
		r    rune
		want bool
	}{
		{'!', true}, {'$', true}, {'+', true}, {'^', true}, {'`', true}, {'~', true}, {'|', true},
		{'a', false}, {' ', false}, {'0', false},
		{'¿', true}, {'«', true}, {'、', true}, {'。', true}, {'—', true},
		{'€', false}, {'©', false}, {'日', false},
		// HF's tables are older than Go's: U+166D was still punctuation and
		// U+2E43 not yet.
		{0x166D, true}, {0x2E43, false},
	} {
		if got := isHFPunct(tc.r); got != tc.want {
			t.Errorf("isHFPunct(%U) = %v, want %v", tc.r, got, tc.want)
		}
	}
}
