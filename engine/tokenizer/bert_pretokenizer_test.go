package tokenizer

import "testing"

func TestBertPreTokenizer(t *testing.T) {
	checkPreTokenize(t, bertPreTokenizer{}, []preTokenizeCase{
		{"Hello, world!", []string{"Hello", ",", "world", "!"}},
		{"a$b+c^d", []string{"a", "$", "b", "+", "c", "^", "d"}},
		{"a`b~c|d", []string{"a", "`", "b", "~", "c", "|", "d"}},
		{"a€b", []string{"a€b"}}, // a currency symbol is not punctuation
		{"a¿b«c»", []string{"a", "¿", "b", "«", "c", "»"}},
		{"  a \u3000 b\u00a0c  ", []string{"a", "b", "c"}},
		{"x\u2028y\u0085z\vw", []string{"x", "y", "z", "w"}},
		{"...", []string{".", ".", "."}},
		{"don't", []string{"don", "'", "t"}},
		{"a\u166db", []string{"a", "\u166d", "b"}},
		{"a\u2e43b", []string{"a\u2e43b"}},
		{"", nil},
		{"   ", nil},
		{"[CLS] [MASK]", []string{"[", "CLS", "]", "[", "MASK", "]"}},
	})
}
