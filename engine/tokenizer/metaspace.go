package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

func init() {
	registerPreTokenizer("Metaspace", newMetaspace)
	registerPreTokenizer("Sequence", newPreTokenizerSequence)
}

// prependScheme says when Metaspace puts the replacement before a piece.
type prependScheme int

const (
	prependAlways prependScheme = iota
	prependFirst
	prependNever
)

// metaspace is HF's Metaspace pre-tokenizer: spaces become the replacement
// character (U+2581 for SentencePiece), one is prepended per the scheme, and
// the text is split before every replacement character.
type metaspace struct {
	rep    string
	scheme prependScheme
	split  bool
}

func newMetaspace(raw json.RawMessage) (preTokenizer, error) {
	var cfg struct {
		Replacement    *string `json:"replacement"`
		StrRep         *string `json:"str_rep"`
		AddPrefixSpace *bool   `json:"add_prefix_space"`
		PrependScheme  *string `json:"prepend_scheme"`
		Split          *bool   `json:"split"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("metaspace: %w", err)
	}
	m := &metaspace{rep: "▁", scheme: prependAlways, split: true}
	switch {
	case cfg.Replacement != nil:
		m.rep = *cfg.Replacement
	case cfg.StrRep != nil:
		m.rep = *cfg.StrRep
	}
	if utf8.RuneCountInString(m.rep) != 1 {
		return nil, fmt.Errorf("metaspace: replacement %q must be one character", m.rep)
	}
	// The older form has only add_prefix_space; prepend_scheme wins when both
	// are present, as in HF's deserializer.
	if cfg.AddPrefixSpace != nil && !*cfg.AddPrefixSpace {
		m.scheme = prependNever
	}
	if cfg.PrependScheme != nil {
		switch *cfg.PrependScheme {
		case "always":
			m.scheme = prependAlways
		case "first":
			m.scheme = prependFirst
		case "never":
			m.scheme = prependNever
		default:
			return nil, fmt.Errorf("%w: metaspace prepend_scheme %q", ErrUnsupported, *cfg.PrependScheme)
		}
	}
	if cfg.Split != nil {
		m.split = *cfg.Split
	}
	return m, nil
}

func (m *metaspace) preTokenize(dst []string, s string) []string {
	return m.preTokenizeAt(dst, s, true)
}

func (m *metaspace) preTokenizeAt(dst []string, s string, atStart bool) []string {
	if strings.IndexByte(s, ' ') >= 0 {
		s = strings.ReplaceAll(s, " ", m.rep)
	}
	if !strings.HasPrefix(s, m.rep) && (m.scheme == prependAlways || (m.scheme == prependFirst && atStart)) {
		s = m.rep + s
	}
	if !m.split {
		if s != "" {
			dst = append(dst, s)
		}
		return dst
	}
	// Split with the delimiter merged into the piece that follows it. The
	// search starts one byte in so a piece keeps its own leading delimiter;
	// the delimiter is valid UTF-8, so it only matches on rune boundaries.
	for start := 0; start < len(s); {
		i := strings.Index(s[start+1:], m.rep)
		if i < 0 {
			dst = append(dst, s[start:])
			break
		}
		dst = append(dst, s[start:start+1+i])
		start += 1 + i
	}
	return dst
}

// preTokenizerSequence runs each pre-tokenizer over the pieces of the one
// before it.
type preTokenizerSequence []preTokenizer

func newPreTokenizerSequence(raw json.RawMessage) (preTokenizer, error) {
	var cfg struct {
		PreTokenizers []json.RawMessage `json:"pretokenizers"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("pre-tokenizer sequence: %w", err)
	}
	seq := make(preTokenizerSequence, 0, len(cfg.PreTokenizers))
	for _, c := range cfg.PreTokenizers {
		p, err := buildPreTokenizer(c)
		if err != nil {
			return nil, err
		}
		if p != nil {
			seq = append(seq, p)
		}
	}
	return seq, nil
}

func (seq preTokenizerSequence) preTokenize(dst []string, s string) []string {
	return seq.preTokenizeAt(dst, s, true)
}

func (seq preTokenizerSequence) preTokenizeAt(dst []string, s string, atStart bool) []string {
	if len(seq) == 0 {
		return append(dst, s)
	}
	base := len(dst)
	dst = preTokenizeAt(seq[0], dst, s, atStart)
	for _, p := range seq[1:] {
		// Each stage rewrites the words of the previous one; the scratch
		// copy keeps the loop linear without aliasing dst.
		words := append([]string(nil), dst[base:]...)
		dst = dst[:base]
		for i, w := range words {
			dst = preTokenizeAt(p, dst, w, atStart && i == 0)
		}
	}
	return dst
}

// preTokenizeAt calls p, telling it whether s starts the text when it cares.
func preTokenizeAt(p preTokenizer, dst []string, s string, atStart bool) []string {
	if sa, ok := p.(startAwarePreTokenizer); ok {
		return sa.preTokenizeAt(dst, s, atStart)
	}
	return p.preTokenize(dst, s)
}
