package tokenizer

import "testing"

func TestWhitespacePreTokenizer(t *testing.T) {
	checkPreTokenize(t, whitespacePreTokenizer{}, []preTokenizeCase{
		{"Hello, world!", []string{"Hello", ",", "world", "!"}},
		{"a...b", []string{"a", "...", "b"}},
		{"foo_bar 123", []string{"foo_bar", "123"}},
		{"cafe\u0301 x", []string{"cafe\u0301", "x"}}, // marks are word characters
		{"a—b", []string{"a", "—", "b"}},
		{"$100.00", []string{"$", "100", ".", "00"}},
		{"日本語です", []string{"日本語です"}},
		{"😀😀 x", []string{"😀😀", "x"}},
		{"a²b", []string{"a", "²", "b"}},   // No is not \w
		{"aⅫb", []string{"aⅫb"}},           // Nl is Alphabetic, so \w
		{"a\u200db", []string{"a\u200db"}}, // Join_Control is \w
		{"a·b", []string{"a", "·", "b"}},
		{"  \t ", nil},
		{"", nil},
	})
}

func TestWhitespaceSplit(t *testing.T) {
	checkPreTokenize(t, whitespaceSplit{}, []preTokenizeCase{
		{"a  b\tc\u3000d", []string{"a", "b", "c", "d"}},
		{"Hello, world!", []string{"Hello,", "world!"}},
		{" \u0085x\v", []string{"x"}},
		{"", nil},
	})
}
