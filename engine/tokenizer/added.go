package tokenizer

import (
	"sort"
	"unicode"
	"unicode/utf8"
)

// addedToken is one entry of tokenizer.json's added_tokens.
type addedToken struct {
	ID         int32  `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// addedMatcher finds added tokens in text the way HF's AddedVocabulary does:
// an Aho-Corasick search with leftmost-longest semantics (at the leftmost
// position where any token matches, the longest one), non-overlapping, then
// the single_word, lstrip and rstrip rules applied to each match.
type addedMatcher struct {
	tokens []addedToken
	// byFirst lists, per first byte, the tokens starting with it, longest
	// first, so the first hit at a position is the leftmost-longest match.
	byFirst [256][]int32
}

func newAddedMatcher(tokens []addedToken) *addedMatcher {
	m := &addedMatcher{tokens: tokens}
	for i, t := range tokens {
		if t.Content == "" {
			continue
		}
		c := t.Content[0]
		m.byFirst[c] = append(m.byFirst[c], int32(i))
	}
	for c := range m.byFirst {
		l := m.byFirst[c]
		sort.SliceStable(l, func(a, b int) bool { return len(tokens[l[a]].Content) > len(tokens[l[b]].Content) })
	}
	return m
}

func (m *addedMatcher) empty() bool { return m == nil || len(m.tokens) == 0 }

// segment is a piece of text: an added token (id >= 0) or text to tokenize.
type segment struct {
	text    string
	id      int32
	atStart bool // the piece starts the original text
}

// split appends the segments of s to dst. Text segments may be empty; the
// caller drops them after normalization, as HF does.
func (m *addedMatcher) split(dst []segment, s string, atStart bool) []segment {
	if m.empty() {
		return append(dst, segment{text: s, id: -1, atStart: atStart})
	}
	done := 0 // HF's start_offset: the end of the previous split
	for pos := 0; pos < len(s); {
		ti, ok := m.matchAt(s, pos)
		if !ok {
			pos++
			continue
		}
		t := &m.tokens[ti]
		start, stop := pos, pos+len(t.Content)
		pos = stop
		if t.SingleWord && (endsWithWord(s[:start]) || startsWithWord(s[stop:])) {
			continue
		}
		if t.LStrip {
			start = max(leftmostSpaceAtEnd(s[:start]), done)
		}
		if t.RStrip {
			stop += rightmostSpaceAtStart(s[stop:])
		}
		if done < start {
			dst = append(dst, segment{text: s[done:start], id: -1, atStart: atStart && done == 0})
		}
		dst = append(dst, segment{text: s[start:stop], id: t.ID})
		done = stop
	}
	if done != len(s) || len(s) == 0 {
		dst = append(dst, segment{text: s[done:], id: -1, atStart: atStart && done == 0})
	}
	return dst
}

func (m *addedMatcher) matchAt(s string, pos int) (int32, bool) {
	for _, ti := range m.byFirst[s[pos]] {
		c := m.tokens[ti].Content
		if len(s)-pos >= len(c) && s[pos:pos+len(c)] == c {
			return ti, true
		}
	}
	return 0, false
}

// isWordChar is regex \w as Rust's regex crate defines it for Unicode.
func isWordChar(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) ||
		unicode.Is(unicode.Pc, r) || unicode.Is(unicode.Other_Alphabetic, r) ||
		unicode.Is(unicode.Nl, r) || r == 0x200C || r == 0x200D
}

func endsWithWord(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordChar(r)
}

func startsWithWord(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordChar(r)
}

// leftmostSpaceAtEnd is where the run of whitespace ending s starts.
func leftmostSpaceAtEnd(s string) int {
	i := len(s)
	for i > 0 {
		r, n := utf8.DecodeLastRuneInString(s[:i])
		if !unicode.IsSpace(r) {
			break
		}
		i -= n
	}
	return i
}

// rightmostSpaceAtStart is the length of the run of whitespace starting s.
func rightmostSpaceAtStart(s string) int {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !unicode.IsSpace(r) {
			break
		}
		i += n
	}
	return i
}
