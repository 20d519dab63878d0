package tokenizer

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The parity harness: every tokenizer under the repository's
// testdata/tokenizers that has expectations in testdata/parity must give
// HuggingFace's ids on every line of the corpus, in each mode the generator
// (scripts/gen-tokenizer-testdata.sh) wrote.

const (
	tokenizersDir = "../../testdata/tokenizers"
	parityDir     = "testdata/parity"
)

// parityModes are the expectation files per tokenizer and how to encode.
var parityModes = map[string]Options{
	"default":   {AddSpecialTokens: true},
	"nospecial": {AddSpecialTokens: false},
	"max64":     {AddSpecialTokens: true, MaxTokens: 64},
}

func readJSONL[T any](t testing.TB, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s:%d: %v", path, len(out)+1, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func parityCorpus(t testing.TB) []string {
	type line struct {
		Text string `json:"text"`
	}
	var texts []string
	for _, l := range readJSONL[line](t, filepath.Join(parityDir, "corpus.jsonl")) {
		texts = append(texts, l.Text)
	}
	return texts
}

func tokenizerFiles(t testing.TB) []string {
	files, err := filepath.Glob(filepath.Join(tokenizersDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no tokenizer files under %s (%v)", tokenizersDir, err)
	}
	return files
}

func TestParity(t *testing.T) {
	texts := parityCorpus(t)
	for _, path := range tokenizerFiles(t) {
		name := strings.TrimSuffix(filepath.Base(path), ".json")
		t.Run(name, func(t *testing.T) {
			tok, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for mode, opt := range parityModes {
				exp := filepath.Join(parityDir, name+"."+mode+".expected.jsonl")
				if _, err := os.Stat(exp); err != nil {
					continue
				}
				found = true
				t.Run(mode, func(t *testing.T) {
					checkParity(t, tok, texts, exp, opt)
				})
			}
			if !found {
				t.Skipf("no expectations for %s in %s", name, parityDir)
			}
		})
	}
}

func checkParity(t *testing.T, tok *Tokenizer, texts []string, expPath string, opt Options) {
	type want struct {
		IDs []int32 `json:"ids"`
	}
	exp := readJSONL[want](t, expPath)
	if len(exp) != len(texts) {
		t.Fatalf("%s has %d lines, corpus %d", expPath, len(exp), len(texts))
	}
	got := tok.EncodeBatch(texts, opt)
	same, shown := 0, 0
	for i, w := range exp {
		if slices.Equal(got[i].IDs, w.IDs) {
			same++
			continue
		}
		if shown < 5 {
			shown++
			t.Errorf("line %d %q:\n%s", i+1, clip(texts[i], 120), firstDiff(tok, got[i].IDs, w.IDs))
		}
	}
	t.Logf("%s: %d/%d identical (%.2f%%)", filepath.Base(expPath), same, len(exp), 100*float64(same)/float64(len(exp)))
}

// firstDiff shows both id lists around their first difference, with tokens.
func firstDiff(tok *Tokenizer, got, want []int32) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	lo := max(i-3, 0)
	show := func(ids []int32) string {
		var b strings.Builder
		for _, id := range ids[lo:min(len(ids), i+6)] {
			s, _ := tok.IDToToken(id)
			fmt.Fprintf(&b, "%d:%q ", id, s)
		}
		return b.String()
	}
	return fmt.Sprintf("  first diff at %d (len got %d, want %d)\n  got  %s\n  want %s", i, len(got), len(want), show(got), show(want))
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
