package tokenizer

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// punctuationPreTokenizer is HF's pre_tokenizers.Punctuation: split around
// each punctuation character (isHFPunct), keeping it as the behavior says.
type punctuationPreTokenizer struct {
	behavior punctuationBehavior
}

// punctuationBehavior is HF's SplitDelimiterBehavior: what happens to a
// delimiter character when text is split around it.
type punctuationBehavior uint8

const (
	punctIsolated           punctuationBehavior = iota // its own word
	punctRemoved                                       // dropped
	punctMergedWithPrevious                            // appended to the word before
	punctMergedWithNext                                // prepended to the word after
	punctContiguous                                    // a run of them is one word
)

var punctuationBehaviors = map[string]punctuationBehavior{
	"Isolated":           punctIsolated,
	"Removed":            punctRemoved,
	"MergedWithPrevious": punctMergedWithPrevious,
	"MergedWithNext":     punctMergedWithNext,
	"Contiguous":         punctContiguous,
}

func init() {
	registerPreTokenizer("Punctuation", newPunctuationPreTokenizer)
}

func newPunctuationPreTokenizer(raw json.RawMessage) (preTokenizer, error) {
	var cfg struct {
		Behavior string `json:"behavior"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("punctuation: %w", err)
	}
	if cfg.Behavior == "" {
		return punctuationPreTokenizer{behavior: punctIsolated}, nil
	}
	b, ok := punctuationBehaviors[cfg.Behavior]
	if !ok {
		return nil, fmt.Errorf("%w: Punctuation behavior %q", ErrUnsupported, cfg.Behavior)
	}
	return punctuationPreTokenizer{behavior: b}, nil
}

func (p punctuationPreTokenizer) preTokenize(dst []string, s string) []string {
	return splitOnRunes(dst, s, isHFPunct, p.behavior)
}

// splitOnRunes splits s around every character for which isDelim is true,
// as HF's NormalizedString::split with a char predicate, and appends the
// non-empty pieces to dst.
func splitOnRunes(dst []string, s string, isDelim func(rune) bool, behavior punctuationBehavior) []string {
	// start is where the pending piece begins; prevDelim is whether the last
	// character was a delimiter, which decides if the next one joins it.
	start, prevDelim := 0, false
	emit := func(end int) {
		if start < end {
			dst = append(dst, s[start:end])
		}
		start = end
	}
	for i := 0; i < len(s); {
		r, size := rune(s[i]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(s[i:])
		}
		end := i + size
		if !isDelim(r) {
			// A delimiter before this ends its piece, except that
			// MergedWithNext carries one delimiter into the next word.
			if prevDelim {
				switch behavior {
				case punctMergedWithNext:
					// The piece started at the delimiter: keep growing.
				default:
					emit(i)
				}
			}
			prevDelim = false
			i = end
			continue
		}
		switch behavior {
		case punctIsolated:
			emit(i)
			emit(end)
		case punctRemoved:
			emit(i)
			start = end
		case punctMergedWithPrevious:
			if prevDelim {
				emit(i)
			}
			emit(end)
		case punctMergedWithNext:
			emit(i)
		case punctContiguous:
			if !prevDelim {
				emit(i)
			}
		}
		prevDelim = true
		i = end
	}
	emit(len(s))
	return dst
}
