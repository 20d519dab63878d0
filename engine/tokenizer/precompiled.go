package tokenizer

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/rivo/uniseg"
)

// precompiled is SentencePiece's precompiled normalizer (HF:
// normalizers.Precompiled, crate spm_precompiled). The charsmap blob is a
// 4-byte little-endian trie size, a Darts double-array trie of that many
// bytes, then NUL-terminated replacement strings the trie values point at.
type precompiled struct {
	trie       []uint32
	normalized string
	// The transform of each ASCII character, computed once: most text is
	// mostly ASCII, and an ASCII character followed by another is a whole
	// grapheme (except CR LF), so it needs no segmentation either.
	ascii    [utf8.RuneSelf]string
	asciiHit [utf8.RuneSelf]bool
}

func init() {
	registerNormalizer("Precompiled", newPrecompiled)
}

func newPrecompiled(raw json.RawMessage) (normalizer, error) {
	var cfg struct {
		Charsmap string `json:"precompiled_charsmap"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("precompiled: %w", err)
	}
	blob, err := base64.StdEncoding.DecodeString(cfg.Charsmap)
	if err != nil {
		return nil, fmt.Errorf("precompiled: charsmap: %w", err)
	}
	return parsePrecompiled(blob)
}

var errCharsmap = errors.New("precompiled: malformed charsmap")

func parsePrecompiled(blob []byte) (*precompiled, error) {
	if len(blob) == 0 {
		// HF accepts an empty charsmap as "no normalization".
		return &precompiled{}, nil
	}
	if len(blob) < 4 {
		return nil, errCharsmap
	}
	size := binary.LittleEndian.Uint32(blob)
	blob = blob[4:]
	if uint64(size) > uint64(len(blob)) || size%4 != 0 {
		return nil, fmt.Errorf("%w: trie size %d, blob %d bytes", errCharsmap, size, len(blob))
	}
	p := &precompiled{trie: make([]uint32, size/4)}
	for i := range p.trie {
		p.trie[i] = binary.LittleEndian.Uint32(blob[4*i:])
	}
	rest := blob[size:]
	if !utf8.Valid(rest) {
		return nil, fmt.Errorf("%w: replacement strings are not UTF-8", errCharsmap)
	}
	p.normalized = string(rest)
	for c := range p.ascii {
		p.ascii[c], p.asciiHit[c] = p.transform(string(rune(c)))
	}
	return p, nil
}

// The Darts unit layout, as spm_precompiled reads it.
func unitHasLeaf(u uint32) bool { return (u>>8)&1 == 1 }
func unitValue(u uint32) uint32 { return u & (1<<31 - 1) }
func unitLabel(u uint32) uint32 { return u & (1<<31 | 0xFF) }
func unitOffset(u uint32) uint32 {
	return (u >> 10) << ((u & (1 << 9)) >> 6)
}

// firstPrefix returns the value of the shortest key in the trie that is a
// prefix of key. HF takes the first common-prefix-search result, i.e. the
// shortest, even when a longer key matches too; so does this.
func (p *precompiled) firstPrefix(key string) (uint32, bool) {
	if len(p.trie) == 0 {
		return 0, false
	}
	pos := unitOffset(p.trie[0])
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c == 0 {
			break
		}
		pos ^= uint32(c)
		if int(pos) >= len(p.trie) {
			return 0, false
		}
		u := p.trie[pos]
		if unitLabel(u) != uint32(c) {
			return 0, false
		}
		pos ^= unitOffset(u)
		if unitHasLeaf(u) {
			if int(pos) >= len(p.trie) {
				return 0, false
			}
			return unitValue(p.trie[pos]), true
		}
	}
	return 0, false
}

// transform is the replacement for chunk, if its shortest trie prefix has one.
func (p *precompiled) transform(chunk string) (string, bool) {
	v, ok := p.firstPrefix(chunk)
	if !ok || int(v) > len(p.normalized) {
		return "", false
	}
	s := p.normalized[v:]
	if end := strings.IndexByte(s, 0); end >= 0 {
		s = s[:end]
	}
	return s, true
}

// normalize applies the charsmap the way HF does: grapheme by grapheme, a
// whole grapheme shorter than 6 bytes first (replaced entirely by what its
// shortest matching prefix maps to), else each character on its own.
func (p *precompiled) normalize(s string) string {
	if len(p.trie) == 0 || s == "" {
		return s
	}
	var b strings.Builder
	modified := false
	state := -1
	rest := s
	for len(rest) > 0 {
		var g string
		g, rest, state = nextGrapheme(rest, state)
		// begin switches to building the output at the first change.
		begin := func(done int) {
			if !modified {
				modified = true
				b.Grow(len(s) + 8)
				b.WriteString(s[:len(s)-len(rest)-len(g)])
				b.WriteString(g[:done])
			}
		}
		if len(g) == 1 {
			if c := g[0]; p.asciiHit[c] {
				begin(0)
				b.WriteString(p.ascii[c])
			} else if modified {
				b.WriteByte(c)
			}
			continue
		}
		if len(g) < 6 {
			if r, ok := p.transform(g); ok {
				begin(0)
				b.WriteString(r)
				continue
			}
		}
		for i := 0; i < len(g); {
			_, n := utf8.DecodeRuneInString(g[i:])
			c := g[i : i+n]
			i += n
			if r, ok := p.transform(c); ok {
				begin(i - n)
				b.WriteString(r)
			} else if modified {
				b.WriteString(c)
			}
		}
	}
	if !modified {
		return s
	}
	return b.String()
}

// nextGrapheme splits the first grapheme cluster off s. Most clusters are a
// single character that cannot join its neighbours; those are recognised
// without uniseg's state machine, which otherwise dominates the cost.
// Restarting uniseg with state -1 after such a character is exact: no
// break rule looks back past a character that joins nothing.
func nextGrapheme(s string, state int) (g, rest string, newState int) {
	r, n := utf8.DecodeRuneInString(s)
	if loneRune(r) && (n == len(s) || startsLone(s[n:])) {
		return s[:n], s[n:], -1
	}
	g, rest, _, newState = uniseg.FirstGraphemeClusterInString(s, state)
	return g, rest, newState
}

// startsLone reports whether s starts with a character that joins nothing
// on its left, so a lone character before it ends a cluster. ASCII joins
// leftwards only as the LF of CR LF, and CR is not lone.
func startsLone(s string) bool {
	if s[0] < utf8.RuneSelf {
		return true
	}
	r, _ := utf8.DecodeRuneInString(s)
	return loneRune(r)
}

// loneRune reports whether r never joins a neighbour in a grapheme cluster
// when both neighbours are such characters: not CR, LF, Extend, ZWJ,
// SpacingMark, Prepend, Hangul jamo or syllable, regional indicator or
// extended pictographic. Known for the BMP; other planes take uniseg.
func loneRune(r rune) bool {
	if r < utf8.RuneSelf {
		return r != '\r' && r != '\n'
	}
	if r > 0xFFFF {
		return false
	}
	return loneTable()[r>>6]&(1<<(r&63)) != 0
}

// loneTable is built once from uniseg itself, so it follows the same
// Unicode version as the slow path.
var loneTable = sync.OnceValue(func() *[1 << 10]uint64 {
	var t [1 << 10]uint64
	first := func(s string) string {
		g, _, _, _ := uniseg.FirstGraphemeClusterInString(s, -1)
		return g
	}
	for r := rune(utf8.RuneSelf); r <= 0xFFFF; r++ {
		if (r >= 0xD800 && r <= 0xDFFF) || (r >= 0x1100 && r <= 0x11FF) || (r >= 0xA960 && r <= 0xA97F) ||
			(r >= 0xAC00 && r <= 0xD7FF) {
			continue // surrogates, Hangul jamo and syllables
		}
		c := string(r)
		if first("a"+c) == "a" && first(c+"a") == c && first("\U0001F600\u200D"+c) == "\U0001F600\u200D" {
			t[r>>6] |= 1 << (r & 63)
		}
	}
	return &t
})
