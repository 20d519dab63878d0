package gateway

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestSplit(t *testing.T) {
	for _, c := range []struct {
		texts                      []string
		jobTexts, jobBytes, tokens int
		want                       string
	}{
		{[]string{"a"}, 2, 100, 1000, "[{0 1 2}]"},
		{[]string{"a", "b", "c", "d", "e"}, 2, 100, 1000, "[{0 2 4} {2 4 4} {4 5 2}]"},
		{[]string{"aaaa", "bbbb", "cc", "dddddddd", "e"}, 10, 6, 1000, "[{0 1 3} {1 3 5} {3 4 4} {4 5 2}]"},
		{[]string{strings.Repeat("x", 50), "y"}, 10, 10, 1000, "[{0 1 18} {1 2 2}]"}, // a text over the byte budget goes alone
		{[]string{"", "", ""}, 2, 1, 1000, "[{0 2 4} {2 3 2}]"},
		// The token budget (len/3+2 a text) cuts too: a member's capacity.
		{[]string{"aaaaaa", "bbbbbb", "cccccc", "d"}, 10, 100, 8, "[{0 2 8} {2 4 6}]"},
		{[]string{strings.Repeat("x", 60), "y"}, 10, 100, 8, "[{0 1 22} {1 2 2}]"}, // alone over the budget
	} {
		if got := fmt.Sprint(split(c.texts, c.jobTexts, c.jobBytes, c.tokens)); got != c.want {
			t.Errorf("split(%q, %d, %d, %d) = %s, want %s", c.texts, c.jobTexts, c.jobBytes, c.tokens, got, c.want)
		}
	}
}

func FuzzParseInput(f *testing.F) {
	for _, s := range []string{`"a"`, `["a","b"]`, `[1,2]`, `[[1],[2]]`, `[]`, `null`, `{"a":1}`, `["a",1]`, `[-1]`, `[" ",null]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		texts, err := parseInput(raw, 8)
		if (err == nil) == (texts == nil) {
			t.Fatalf("parseInput(%q) = %q, %v", raw, texts, err)
		}
		if err == nil && (len(texts) == 0 || len(texts) > 8) {
			t.Fatalf("parseInput(%q) gave %d texts", raw, len(texts))
		}
	})
}

// FuzzDecodeRequests: any body decodes into an embeddings, TEI or rerank
// call or is refused with an answer that quotes at most a few dozen bytes
// of it; nothing panics.
func FuzzDecodeRequests(f *testing.F) {
	for _, s := range []string{`{"input":"a"}`, `{"inputs":["a","b"],"normalize":true}`, `{"input":"a","input":"b"}`,
		`{"INPUT":"a"}`, `{"query":"q","texts":["a"],"weights":{"dense":1}}`, `{"a":` + strings.Repeat("[", 40) + `}`, `1e999`} {
		f.Add([]byte(s))
	}
	c := Config{Requester: nil}.WithDefaults()
	f.Fuzz(func(t *testing.T, body []byte) {
		if _, _, aerr := decodeRequest(body, &c); aerr != nil && len(aerr.Message) > 512 {
			t.Fatalf("a %d-byte message for a %d-byte body", len(aerr.Message), len(body))
		}
		s := &Server{cfg: c}
		if _, _, aerr := s.decodeTEI(body); aerr != nil && len(aerr.Message) > 512 {
			t.Fatalf("a %d-byte message for a %d-byte body", len(aerr.Message), len(body))
		}
		var raw json.RawMessage
		if aerr := decodeObject(body, fields{"weights": &raw}); aerr == nil {
			_, _ = decodeWeights(raw)
		}
	})
}
