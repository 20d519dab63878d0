package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
	"golang.org/x/text/unicode/rangetable"
)

// bertNormalizer is HF's normalizers.BertNormalizer: the text clean-up of the
// original BERT BasicTokenizer, in HF's order (clean, CJK padding, accents,
// lowercase).
type bertNormalizer struct {
	cleanText          bool
	handleChineseChars bool
	stripAccents       bool
	lowercase          bool
}

func init() {
	registerNormalizer("BertNormalizer", newBertNormalizer)
}

func newBertNormalizer(raw json.RawMessage) (normalizer, error) {
	// Absent fields take HF's serde defaults: everything on, strip_accents
	// null (which then follows lowercase).
	cfg := struct {
		CleanText          *bool `json:"clean_text"`
		HandleChineseChars *bool `json:"handle_chinese_chars"`
		StripAccents       *bool `json:"strip_accents"`
		Lowercase          *bool `json:"lowercase"`
	}{}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("BertNormalizer: %w", err)
	}
	orTrue := func(b *bool) bool { return b == nil || *b }
	n := &bertNormalizer{
		cleanText:          orTrue(cfg.CleanText),
		handleChineseChars: orTrue(cfg.HandleChineseChars),
		lowercase:          orTrue(cfg.Lowercase),
	}
	n.stripAccents = n.lowercase
	if cfg.StripAccents != nil {
		n.stripAccents = *cfg.StripAccents
	}
	return n, nil
}

func (n *bertNormalizer) normalize(s string) string {
	if isPlainASCII(s) {
		return n.normalizeASCII(s)
	}
	if n.cleanText || n.handleChineseChars {
		var b strings.Builder
		b.Grow(len(s) + 8)
		for _, r := range s {
			if n.cleanText {
				if isBertControl(r) {
					continue
				}
				if isBertWhitespace(r) {
					r = ' '
				}
			}
			if n.handleChineseChars && isChineseChar(r) {
				b.WriteByte(' ')
				b.WriteRune(r)
				b.WriteByte(' ')
				continue
			}
			b.WriteRune(r)
		}
		s = b.String()
	}
	if n.stripAccents {
		s = nfd(s)
	}
	return n.marksAndCase(s)
}

// hfUndecomposed is the one character Go's NFD decomposes and HF's older
// normalization tables do not (U+11938, Unicode 13; found by the sweep in
// testdata/parity/bert_unicode_sweep.py). It is a starter, so the text on
// either side of it normalizes independently.
const hfUndecomposed = "\U00011938"

// nfd is NFD as HF's BertNormalizer applies it.
func nfd(s string) string {
	if !strings.Contains(s, hfUndecomposed) {
		return norm.NFD.String(s)
	}
	parts := strings.Split(s, hfUndecomposed)
	for i, p := range parts {
		parts[i] = norm.NFD.String(p)
	}
	return strings.Join(parts, hfUndecomposed)
}

// marksAndCase drops Mn (if stripAccents) and lowercases (if lowercase) in
// one pass, returning s itself when neither changes anything.
func (n *bertNormalizer) marksAndCase(s string) string {
	changes := func(r rune) bool {
		return n.stripAccents && isHFNonspacingMark(r) || n.lowercase && lowerChanges(r)
	}
	i := strings.IndexFunc(s, changes)
	if i < 0 {
		return s
	}
	b := make([]byte, 0, len(s)+8)
	b = append(b, s[:i]...)
	for _, r := range s[i:] {
		switch {
		case n.stripAccents && isHFNonspacingMark(r):
		case n.lowercase:
			b = appendLower(b, r)
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	return string(b)
}

// isPlainASCII reports whether s is printable ASCII plus tab, newline and
// carriage return: the common case, for which no step needs Unicode tables.
func isPlainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x7f || (c < 0x20 && c != '\t' && c != '\n' && c != '\r') {
			return false
		}
	}
	return true
}

func (n *bertNormalizer) normalizeASCII(s string) string {
	changed := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (n.cleanText && (c == '\t' || c == '\n' || c == '\r')) || (n.lowercase && 'A' <= c && c <= 'Z') {
			changed = true
			break
		}
	}
	if !changed {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		switch {
		case n.cleanText && (c == '\t' || c == '\n' || c == '\r'):
			b[i] = ' '
		case n.lowercase && 'A' <= c && c <= 'Z':
			b[i] = c + ('a' - 'A')
		}
	}
	return string(b)
}

// isBertWhitespace is Rust's char::is_whitespace (the White_Space property),
// which is also what Go's unicode.IsSpace implements.
func isBertWhitespace(r rune) bool {
	return unicode.IsSpace(r)
}

// isBertControl is HF's clean_text filter: NUL, U+FFFD, and every "Other"
// character (Cc, Cf, Co, Cs and unassigned) except tab, newline and carriage
// return, which count as whitespace. Unassigned means unassigned in the
// Unicode version HF's tables were built from, which is older than Go's, so
// characters assigned since are removed too (see bert_unicode.go).
func isBertControl(r rune) bool {
	switch r {
	case '\t', '\n', '\r':
		return false
	case 0, utf8.RuneError:
		return true
	}
	if r < 0x7f {
		return r < 0x20
	}
	return isHFOther(r)
}

// isChineseChar is HF's is_chinese_char: the CJK Unified Ideographs blocks
// the original BERT treats as one word each. It is the block list of the
// BERT code, not the Han script: Hiragana, Katakana and Hangul are not in it.
func isChineseChar(r rune) bool {
	switch {
	case 0x4E00 <= r && r <= 0x9FFF,
		0x3400 <= r && r <= 0x4DBF,
		0x20000 <= r && r <= 0x2A6DF,
		0x2A700 <= r && r <= 0x2B73F,
		0x2B740 <= r && r <= 0x2B81F,
		0x2B920 <= r && r <= 0x2CEAF,
		0xF900 <= r && r <= 0xFAFF,
		0x2F800 <= r && r <= 0x2FA1F:
		return true
	}
	return false
}

// removeRunes drops the characters for which drop is true; BertNormalizer's
// strip_accents drops Mn after NFD, StripAccents drops combining marks.
func removeRunes(s string, drop func(rune) bool) string {
	i := strings.IndexFunc(s, drop)
	if i < 0 {
		return s
	}
	b := make([]byte, 0, len(s))
	b = append(b, s[:i]...)
	for _, r := range s[i:] {
		if !drop(r) {
			b = utf8.AppendRune(b, r)
		}
	}
	return string(b)
}

// appendLower appends Rust's char::to_lowercase of r: the full (not simple)
// mapping, whose only multi-character case is U+0130. Final sigma is not
// special-cased because HF maps character by character. Characters newer
// than Go's tables come from hfLowercaseExceptions.
func appendLower(b []byte, r rune) []byte {
	switch {
	case r < utf8.RuneSelf:
		if 'A' <= r && r <= 'Z' {
			r += 'a' - 'A'
		}
		return append(b, byte(r))
	case r == 0x130:
		return append(b, "i\u0307"...)
	case unicode.Is(lowercaseExceptionTable, r):
		return append(b, hfLowercaseExceptions[r]...)
	}
	return utf8.AppendRune(b, unicode.ToLower(r))
}

// lowerChanges reports whether appendLower changes r.
func lowerChanges(r rune) bool {
	if r < utf8.RuneSelf {
		return 'A' <= r && r <= 'Z'
	}
	return r == 0x130 || unicode.ToLower(r) != r || unicode.Is(lowercaseExceptionTable, r)
}

// lowercaseExceptionTable is the keys of hfLowercaseExceptions, for a quick
// test before the map lookup.
var lowercaseExceptionTable = func() *unicode.RangeTable {
	keys := make([]rune, 0, len(hfLowercaseExceptions))
	for r := range hfLowercaseExceptions {
		keys = append(keys, r)
	}
	return rangetable.New(keys...)
}()
