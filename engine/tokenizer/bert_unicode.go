package tokenizer

import "unicode"

// HF's BERT components classify characters with the unicode_categories
// crate, whose tables predate Go's by several Unicode versions (U+166D is
// still punctuation there, U+0890 not yet a format character), and its
// Whitespace pre-tokenizer with Oniguruma, whose tables are newer than Go's.
// Go's own tables would differ from HF on a few hundred code points, so the
// classes come from bert_unicode_tables.go, measured against HF tokenizers.
// Only White_Space, which has not changed, uses Go's table.

// isHFOther is unicode_categories' is_other as HF sees it: Cc, Cf, Co, Cs.
// Unassigned code points are not included, as HF keeps them.
func isHFOther(r rune) bool {
	return unicode.Is(hfOtherTable, r)
}

// isHFNonspacingMark is unicode_categories' is_mark_nonspacing (Mn).
func isHFNonspacingMark(r rune) bool {
	return r >= 0x300 && unicode.Is(hfMnTable, r)
}

// isHFCombiningMark is HF's is_combining_mark (Mn, Mc, Me), the StripAccents
// normalizer's test, which is wider than BertNormalizer's Mn.
func isHFCombiningMark(r rune) bool {
	return r >= 0x300 && unicode.Is(hfCombiningMarkTable, r)
}

// isHFPunct is HF's is_punc / is_bert_punc: ASCII punctuation (which
// includes symbols such as $, + and ^) or a Unicode P* character.
func isHFPunct(r rune) bool {
	if r < 0x80 {
		return 33 <= r && r <= 47 || 58 <= r && r <= 64 || 91 <= r && r <= 96 || 123 <= r && r <= 126
	}
	return unicode.Is(hfPunctTable, r)
}

// isRegexWord is Oniguruma's Unicode \w: letters, marks, decimal digits and
// connector punctuation.
func isRegexWord(r rune) bool {
	if r < 0x80 {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '_'
	}
	return unicode.Is(regexWordTable, r)
}

// isRegexSpace is Oniguruma's Unicode \s, the White_Space property.
func isRegexSpace(r rune) bool {
	return unicode.IsSpace(r)
}
