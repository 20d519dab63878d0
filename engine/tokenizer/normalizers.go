package tokenizer

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// The general-purpose normalizers of HF (normalizers.unicode, .utils,
// .replace, .strip, .prepend). Precompiled lives in precompiled.go and the
// BERT ones in the colleague files.

func init() {
	for name, f := range map[string]norm.Form{"NFC": norm.NFC, "NFD": norm.NFD, "NFKC": norm.NFKC, "NFKD": norm.NFKD} {
		registerNormalizer(name, func(json.RawMessage) (normalizer, error) { return unicodeForm{f}, nil })
	}
	registerNormalizer("Lowercase", func(json.RawMessage) (normalizer, error) { return lowercase{}, nil })
	registerNormalizer("Replace", newReplace)
	registerNormalizer("Strip", newStrip)
	registerNormalizer("Prepend", newPrepend)
	registerNormalizer("Sequence", newNormalizerSequence)
}

type unicodeForm struct{ form norm.Form }

func (u unicodeForm) normalize(s string) string { return normalizeForm(u.form, s) }

// lowercase maps rune by rune like Rust's char::to_lowercase (HF does not
// use the context-sensitive final sigma rule of str::to_lowercase).
type lowercase struct{}

func (lowercase) normalize(s string) string {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf || ('A' <= c && c <= 'Z') {
			return lowerFrom(s, i)
		}
	}
	return s
}

func lowerFrom(s string, i int) string {
	var b strings.Builder
	b.Grow(len(s) + 4)
	b.WriteString(s[:i])
	for _, r := range s[i:] {
		if r == 'İ' {
			// The one unconditional multi-rune lowercase mapping.
			b.WriteString("i\u0307")
			continue
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// replace is HF's Replace normalizer: a literal string or a regex, every
// match replaced by a literal content (no $1 expansion, as in HF).
type replace struct {
	literal string
	re      *regexp.Regexp
	content string
}

func newReplace(raw json.RawMessage) (normalizer, error) {
	var cfg struct {
		Pattern struct {
			String *string
			Regex  *string
		}
		Content string
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("replace: %w", err)
	}
	switch {
	case cfg.Pattern.String != nil:
		return &replace{literal: *cfg.Pattern.String, content: cfg.Content}, nil
	case cfg.Pattern.Regex != nil:
		re, err := compileOnig(*cfg.Pattern.Regex)
		if err != nil {
			return nil, fmt.Errorf("replace: %w", err)
		}
		return &replace{re: re, content: cfg.Content}, nil
	}
	return nil, fmt.Errorf("replace: pattern needs String or Regex")
}

func (r *replace) normalize(s string) string {
	if r.re != nil {
		// MatchString allocates nothing; most text has no match.
		if !r.re.MatchString(s) {
			return s
		}
		return r.re.ReplaceAllLiteralString(s, r.content)
	}
	if r.literal == "" {
		return s
	}
	return strings.ReplaceAll(s, r.literal, r.content)
}

// strip removes whitespace (Unicode White_Space, as Rust's is_whitespace) at
// either end.
type strip struct{ left, right bool }

func newStrip(raw json.RawMessage) (normalizer, error) {
	var cfg struct {
		Left  bool `json:"strip_left"`
		Right bool `json:"strip_right"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("strip: %w", err)
	}
	return strip{cfg.Left, cfg.Right}, nil
}

func (st strip) normalize(s string) string {
	if st.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if st.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s
}

// prepend adds a prefix to non-empty text.
type prepend struct{ prefix string }

func newPrepend(raw json.RawMessage) (normalizer, error) {
	var cfg struct {
		Prepend string `json:"prepend"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("prepend: %w", err)
	}
	return prepend{cfg.Prepend}, nil
}

func (p prepend) normalize(s string) string {
	if s == "" {
		return s
	}
	return p.prefix + s
}

type normalizerSequence []normalizer

func newNormalizerSequence(raw json.RawMessage) (normalizer, error) {
	var cfg struct {
		Normalizers []json.RawMessage `json:"normalizers"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("normalizer sequence: %w", err)
	}
	seq := make(normalizerSequence, 0, len(cfg.Normalizers))
	for _, c := range cfg.Normalizers {
		n, err := buildNormalizer(c)
		if err != nil {
			return nil, err
		}
		if n != nil {
			seq = append(seq, n)
		}
	}
	return seq, nil
}

func (seq normalizerSequence) normalize(s string) string {
	for _, n := range seq {
		s = n.normalize(s)
	}
	return s
}
