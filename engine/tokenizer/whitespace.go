package tokenizer

import (
	"encoding/json"
	"unicode/utf8"
)

// whitespacePreTokenizer is HF's pre_tokenizers.Whitespace: the words of the
// regex \w+|[^\w\s]+, with Oniguruma's Unicode classes. Everything between
// matches is whitespace, so a scan over character classes gives the same
// words without a regex engine.
type whitespacePreTokenizer struct{}

// whitespaceSplit is HF's pre_tokenizers.WhitespaceSplit: split on
// whitespace, dropping it.
type whitespaceSplit struct{}

func init() {
	registerPreTokenizer("Whitespace", func(json.RawMessage) (preTokenizer, error) {
		return whitespacePreTokenizer{}, nil
	})
	registerPreTokenizer("WhitespaceSplit", func(json.RawMessage) (preTokenizer, error) {
		return whitespaceSplit{}, nil
	})
}

// charClass is where a character falls in \w+|[^\w\s]+.
type charClass uint8

const (
	classSpace charClass = iota
	classWord
	classOther
)

func classify(r rune) charClass {
	switch {
	case isRegexWord(r):
		return classWord
	case isRegexSpace(r):
		return classSpace
	}
	return classOther
}

func (whitespacePreTokenizer) preTokenize(dst []string, s string) []string {
	start, cur := 0, classSpace
	for i := 0; i < len(s); {
		r, size := rune(s[i]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(s[i:])
		}
		if c := classify(r); c != cur {
			if cur != classSpace {
				dst = append(dst, s[start:i])
			}
			start, cur = i, c
		}
		i += size
	}
	if cur != classSpace {
		dst = append(dst, s[start:])
	}
	return dst
}

func (whitespaceSplit) preTokenize(dst []string, s string) []string {
	start := -1
	for i, r := range s {
		if isBertWhitespace(r) {
			if start >= 0 {
				dst = append(dst, s[start:i])
				start = -1
			}
		} else if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		dst = append(dst, s[start:])
	}
	return dst
}
