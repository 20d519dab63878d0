package tokenizer

import (
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// golang.org/x/text/unicode/norm follows the Stream-Safe Text Format: after
// 30 non-starters in a row it inserts U+034F (combining grapheme joiner),
// which also stops canonical reordering across that point. HF (Rust's
// unicode-normalization) does neither. normalizeForm takes x/text's fast
// path and, only when it inserted a joiner, redoes the text with the plain
// UAX #15 algorithm below, built on x/text's per-rune data.

const cgj = "\u034f"

// normalizeForm is f applied to s the way Rust's unicode-normalization does.
func normalizeForm(f norm.Form, s string) string {
	out := f.String(s)
	if !strings.Contains(out, cgj) || strings.Count(out, cgj) == strings.Count(s, cgj) {
		return out
	}
	return normalizeUnbounded(f, s)
}

// normalizeUnbounded decomposes, orders the marks of each run canonically
// (a stable sort by combining class, however long the run) and, for NFC and
// NFKC, composes again.
func normalizeUnbounded(f norm.Form, s string) string {
	dec := norm.NFD
	if f == norm.NFKC || f == norm.NFKD {
		dec = norm.NFKD
	}
	rs := make([]rune, 0, len(s))
	for _, r := range s {
		rs = appendDecomposed(rs, dec, r)
	}
	for i := 0; i < len(rs); {
		if ccc(rs[i]) == 0 {
			i++
			continue
		}
		j := i
		for j < len(rs) && ccc(rs[j]) != 0 {
			j++
		}
		slices.SortStableFunc(rs[i:j], func(a, b rune) int { return int(ccc(a)) - int(ccc(b)) })
		i = j
	}
	if f == norm.NFC || f == norm.NFKC {
		rs = composeRunes(rs)
	}
	return string(rs)
}

func ccc(r rune) uint8 {
	var buf [utf8.UTFMax]byte
	n := utf8.EncodeRune(buf[:], r)
	return norm.NFD.Properties(buf[:n]).CCC()
}

// Hangul syllable arithmetic (Unicode 3.12).
const (
	hangulBase  = 0xAC00
	hangulCount = 11172
	jamoLBase   = 0x1100
	jamoVBase   = 0x1161
	jamoTBase   = 0x11A7
	jamoTCount  = 28
	jamoNCount  = 588
)

func appendDecomposed(dst []rune, dec norm.Form, r rune) []rune {
	if r >= hangulBase && r < hangulBase+hangulCount {
		i := r - hangulBase
		dst = append(dst, jamoLBase+i/jamoNCount, jamoVBase+(i%jamoNCount)/jamoTCount)
		if t := i % jamoTCount; t != 0 {
			dst = append(dst, jamoTBase+t)
		}
		return dst
	}
	var buf [utf8.UTFMax]byte
	n := utf8.EncodeRune(buf[:], r)
	d := dec.Properties(buf[:n]).Decomposition()
	if d == nil {
		return append(dst, r)
	}
	for _, x := range string(d) {
		if x == r {
			dst = append(dst, x)
		} else {
			dst = appendDecomposed(dst, dec, x)
		}
	}
	return dst
}

// composeRunes is the canonical composition algorithm of UAX #15.
func composeRunes(rs []rune) []rune {
	if len(rs) == 0 {
		return rs
	}
	starter, last := 0, int(ccc(rs[0]))
	if last != 0 {
		last = 256 // a leading mark has no starter to join
	}
	out := 1
	for _, c := range rs[1:] {
		cc := int(ccc(c))
		if comp, ok := composePair(rs[starter], c); ok && (last < cc || last == 0) {
			rs[starter] = comp
			continue
		}
		if cc == 0 {
			starter = out
		}
		last = cc
		rs[out] = c
		out++
	}
	return rs[:out]
}

var composites sync.Map // [2]rune -> rune, or -1 for none

// composePair is the primary composite of a and b, asked of x/text's NFC.
func composePair(a, b rune) (rune, bool) {
	key := [2]rune{a, b}
	if v, ok := composites.Load(key); ok {
		r := v.(rune)
		return r, r >= 0
	}
	res := rune(-1)
	s := norm.NFC.String(string(key[:]))
	if r, n := utf8.DecodeRuneInString(s); n == len(s) && r != a {
		res = r
	}
	composites.Store(key, res)
	return res, res >= 0
}
