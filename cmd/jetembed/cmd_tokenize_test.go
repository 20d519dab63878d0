package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jetembed/jetembed/engine/tokenizer"
)

var xlmrTokenizer = filepath.Join("..", "..", "testdata", "tokenizers", "xlmr-unigram.json")

func runTokenizeCmd(t *testing.T, stdin string, args ...string) (code int, out, errOut string) {
	t.Helper()
	var o, e bytes.Buffer
	code = runMain(context.Background(), append([]string{"tokenize"}, args...), stdio{in: strings.NewReader(stdin), out: &o, err: &e})
	return code, o.String(), e.String()
}

type tokenizeLine struct {
	IDs   []int32 `json:"ids"`
	Count int     `json:"count"`
	Error string  `json:"error"`
}

func parseTokenizeOut(t *testing.T, out string) []tokenizeLine {
	t.Helper()
	var lines []tokenizeLine
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var v tokenizeLine
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("output line %q: %v", l, err)
		}
		lines = append(lines, v)
	}
	return lines
}

func TestTokenizeCommand(t *testing.T) {
	tok, err := tokenizer.Load(xlmrTokenizer)
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"Hello world", "", "Привет <mask> мир", strings.Repeat("long text ", 50)}
	var in strings.Builder
	for _, s := range texts {
		b, _ := json.Marshal(map[string]string{"text": s})
		in.Write(b)
		in.WriteByte('\n')
	}
	for _, tc := range []struct {
		args []string
		opt  tokenizer.Options
	}{
		{nil, tokenizer.Options{AddSpecialTokens: true}},
		{[]string{"--no-special"}, tokenizer.Options{}},
		{[]string{"--max-tokens", "8"}, tokenizer.Options{AddSpecialTokens: true, MaxTokens: 8}},
	} {
		code, out, errOut := runTokenizeCmd(t, in.String(), append([]string{"--tokenizer", xlmrTokenizer}, tc.args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", tc.args, code, errOut)
		}
		got := parseTokenizeOut(t, out)
		if len(got) != len(texts) {
			t.Fatalf("%v: %d output lines for %d texts", tc.args, len(got), len(texts))
		}
		for i, s := range texts {
			want := tok.Encode(s, tc.opt)
			if !slices.Equal(got[i].IDs, want.IDs) {
				t.Errorf("%v line %d: ids %v, want %v", tc.args, i+1, got[i].IDs, want.IDs)
			}
			wantCount := 0
			if want.Count > len(want.IDs) {
				wantCount = want.Count
			}
			if got[i].Count != wantCount {
				t.Errorf("%v line %d: count %d, want %d", tc.args, i+1, got[i].Count, wantCount)
			}
		}
	}
}

func TestTokenizeCommandBadLines(t *testing.T) {
	stdin := `{"text": "ok"}` + "\n" + `not json` + "\n" + `{"other": 1}` + "\n" + `{"text": "also ok"}` + "\n"
	code, out, errOut := runTokenizeCmd(t, stdin, "--tokenizer", xlmrTokenizer)
	if code == 0 {
		t.Fatalf("exit 0 with bad lines; stderr %q", errOut)
	}
	for _, want := range []string{"line 2:", "line 3:", "2 of 4 lines"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr %q lacks %q", errOut, want)
		}
	}
	got := parseTokenizeOut(t, out)
	if len(got) != 4 {
		t.Fatalf("%d output lines, want 4 (one per input line)", len(got))
	}
	if len(got[0].IDs) == 0 || len(got[3].IDs) == 0 || got[1].Error == "" || got[2].Error == "" {
		t.Errorf("good lines must be tokenized and bad ones flagged: %+v", got)
	}
}

func TestTokenizeCommandUsage(t *testing.T) {
	if code, _, _ := runTokenizeCmd(t, ""); code != 2 {
		t.Errorf("no --tokenizer: exit %d, want 2", code)
	}
	if code, _, errOut := runTokenizeCmd(t, "", "--tokenizer", "does-not-exist.json"); code != 1 || errOut == "" {
		t.Errorf("missing file: exit %d, stderr %q", code, errOut)
	}
}

// TestTokenizeCommandMatchesHuggingFace runs the command over the whole
// parity corpus (many scripts, emoji, controls, 8k+ token documents) and
// holds every output line to the ids HuggingFace tokenizers produced for it,
// committed with the tokenizer package, in its three modes.
func TestTokenizeCommandMatchesHuggingFace(t *testing.T) {
	dir := filepath.Join("..", "..", "engine", "tokenizer", "testdata", "parity")
	corpus, err := os.ReadFile(filepath.Join(dir, "corpus.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for mode, args := range map[string][]string{
		"default":   nil,
		"nospecial": {"--no-special"},
		"max64":     {"--max-tokens", "64"},
	} {
		want, err := os.ReadFile(filepath.Join(dir, "xlmr-unigram."+mode+".expected.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		code, out, errOut := runTokenizeCmd(t, string(corpus), append([]string{"--tokenizer", xlmrTokenizer}, args...)...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", mode, code, errOut)
		}
		got, exp := parseTokenizeOut(t, out), parseTokenizeOut(t, string(want))
		if len(got) != len(exp) || len(got) < 1000 {
			t.Fatalf("%s: %d lines out, %d expected", mode, len(got), len(exp))
		}
		bad := 0
		for i := range exp {
			if !slices.Equal(got[i].IDs, exp[i].IDs) {
				if bad++; bad <= 3 {
					t.Errorf("%s line %d: ids differ from HuggingFace:\n got %v\nwant %v", mode, i+1, got[i].IDs, exp[i].IDs)
				}
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d lines differ", mode, bad, len(exp))
		}
	}
}
