package tokenizer

import "testing"

// normalizerCase is one input and what each BertNormalizer setting makes of
// it, as HF tokenizers 0.23.2 does (worked out from bert.rs and confirmed
// with the oracle).
type normalizerCase struct {
	in                                       string
	uncased, cased, lowerNoStrip, stripMarks string
}

var normalizerCases = []normalizerCase{
	{"Héllo Wörld", "hello world", "Héllo Wörld", "héllo wörld", "Héllo Wörld"},
	{"plain ascii", "plain ascii", "plain ascii", "plain ascii", "plain ascii"},
	{"a\tb\nc\r\nd", "a b c  d", "a b c  d", "a b c  d", "a\tb\nc\r\nd"},
	{"a\x00b\ufffdc\x07d", "abcd", "abcd", "abcd", "a\x00b\ufffdc\x07d"},
	{"a\u200bb", "ab", "ab", "ab", "a\u200bb"},
	{"a\u00a0b\u3000c\u2028d", "a b c d", "a b c d", "a b c d", "a\u00a0b\u3000c\u2028d"},
	// Vertical tab and NEL are whitespace but also controls, and the
	// control filter runs first.
	{"a\vb\u0085c", "abc", "abc", "abc", "a\vb\u0085c"},
	{"中文x", " 中  文 x", " 中  文 x", " 中  文 x", "中文x"},
	{"ＡＢ", "ａｂ", "ＡＢ", "ａｂ", "ＡＢ"},
	{"e\u0301ñ", "en", "e\u0301ñ", "e\u0301ñ", "eñ"},
	{"İ", "i", "İ", "i\u0307", "İ"},
	{"ΣΑΣ", "σασ", "ΣΑΣ", "σασ", "ΣΑΣ"}, // no final sigma
	{"한", "\u1112\u1161\u11ab", "한", "한", "한"},
	{"の", "の", "の", "の", "の"},
	{"a\u0890b", "a\u0890b", "a\u0890b", "a\u0890b", "a\u0890b"}, // a format char newer than HF's tables
	{"Ǆ", "ǆ", "Ǆ", "ǆ", "Ǆ"},
	{"😀", "😀", "😀", "😀", "😀"},
	{"\uA7CB", "\u0264", "\uA7CB", "\u0264", "\uA7CB"}, // lowercase newer than Go's tables
	{"", "", "", "", ""},
	// NFD decomposes U+11938 into U+11935 U+11930 in Go, not in HF.
	{"x\U00011938é\U00011938", "x\U00011938e\U00011938", "x\U00011938é\U00011938", "x\U00011938é\U00011938", "x\U00011938é\U00011938"},
}

func TestBertNormalizer(t *testing.T) {
	configs := []struct {
		name string
		json string
		want func(normalizerCase) string
	}{
		{"uncased", `{"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":true,"strip_accents":null,"lowercase":true}`,
			func(c normalizerCase) string { return c.uncased }},
		{"defaults", `{"type":"BertNormalizer"}`, func(c normalizerCase) string { return c.uncased }},
		{"cased", `{"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":true,"strip_accents":null,"lowercase":false}`,
			func(c normalizerCase) string { return c.cased }},
		{"lower-nostrip", `{"type":"BertNormalizer","strip_accents":false,"lowercase":true}`,
			func(c normalizerCase) string { return c.lowerNoStrip }},
	}
	for _, cfg := range configs {
		n, err := newBertNormalizer([]byte(cfg.json))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range normalizerCases {
			if got, want := n.normalize(c.in), cfg.want(c); got != want {
				t.Errorf("%s: normalize(%q) = %q, want %q", cfg.name, c.in, got, want)
			}
		}
	}
}

func TestBertNormalizerOff(t *testing.T) {
	n, err := newBertNormalizer([]byte(`{"clean_text":false,"handle_chinese_chars":false,"strip_accents":false,"lowercase":false}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range normalizerCases {
		if got := n.normalize(c.in); got != c.in {
			t.Errorf("normalize(%q) = %q, want it unchanged", c.in, got)
		}
	}
}

func TestStripAccents(t *testing.T) {
	for _, c := range normalizerCases {
		if got := (stripAccents{}).normalize(c.in); got != c.stripMarks {
			t.Errorf("normalize(%q) = %q, want %q", c.in, got, c.stripMarks)
		}
	}
	// Unlike BertNormalizer's Mn filter, StripAccents also drops spacing
	// (Mc) and enclosing (Me) marks.
	for in, want := range map[string]string{"a\u0903b": "ab", "a\u20dd": "a", "a\u0488": "a"} {
		if got := (stripAccents{}).normalize(in); got != want {
			t.Errorf("normalize(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestIsChineseChar(t *testing.T) {
	for _, tc := range []struct {
		r    rune
		want bool
	}{
		{'中', true}, {0x3400, true}, {0x4DBF, true}, {0x9FFF, true}, {0xF900, true}, {0x20000, true},
		{0x2B81F, true}, {0x2B820, false}, {0x2B920, true}, {0x2CEAF, true}, {0x2CEB0, false},
		{0x2F800, true}, {0x30000, false}, // CJK Ext. G is not in BERT's list
		{'の', false}, {'カ', false}, {'한', false}, {'Ａ', false}, {0x3000, false},
	} {
		if got := isChineseChar(tc.r); got != tc.want {
			t.Errorf("isChineseChar(%U) = %v, want %v", tc.r, got, tc.want)
		}
	}
}
