package tokenizer

import (
	"encoding/json"
	"unicode/utf8"
)

// bertPreTokenizer is HF's pre_tokenizers.BertPreTokenizer: split on
// whitespace (dropped), then make each punctuation character its own word.
type bertPreTokenizer struct{}

func init() {
	registerPreTokenizer("BertPreTokenizer", func(json.RawMessage) (preTokenizer, error) {
		return bertPreTokenizer{}, nil
	})
}

func (bertPreTokenizer) preTokenize(dst []string, s string) []string {
	start := 0
	for i := 0; i < len(s); {
		r, size := rune(s[i]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(s[i:])
		}
		switch {
		case isBertWhitespace(r):
			if start < i {
				dst = append(dst, s[start:i])
			}
			start = i + size
		case isHFPunct(r):
			if start < i {
				dst = append(dst, s[start:i])
			}
			dst = append(dst, s[i:i+size])
			start = i + size
		}
		i += size
	}
	if start < len(s) {
		dst = append(dst, s[start:])
	}
	return dst
}
