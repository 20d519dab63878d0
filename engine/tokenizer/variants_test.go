package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Variants of the XLM-R test tokenizer that exercise the options the
// committed files do not use (other normalizers, Metaspace schemes, added
// token flags, byte fallback, left truncation). The differential test
// checks them against the HF oracle live.

type variant struct {
	name   string
	mutate func(tok map[string]any)
}

var variants = []variant{
	{"metaspace-first-nosplit", func(tok map[string]any) {
		tok["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false}
	}},
	{"metaspace-never-seq", func(tok map[string]any) {
		tok["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never", "split": true},
		}}
	}},
	{"metaspace-first-after-token", func(tok map[string]any) {
		tok["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true}
	}},
	{"normalizers", func(tok map[string]any) {
		tok["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "NFKD"},
			map[string]any{"type": "Lowercase"},
			map[string]any{"type": "Strip", "strip_left": true, "strip_right": true},
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": "e"}, "content": "ee"},
			map[string]any{"type": "Replace", "pattern": map[string]any{"Regex": `\s+`}, "content": " "},
			map[string]any{"type": "NFC"},
			map[string]any{"type": "Prepend", "prepend": "▁"},
		}}
	}},
	{"nfd-nfkc", func(tok map[string]any) {
		tok["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "NFD"}, map[string]any{"type": "NFKC"},
		}}
	}},
	{"added-flags", func(tok map[string]any) {
		added := tok["added_tokens"].([]any)
		for _, a := range added {
			if m := a.(map[string]any); m["content"] == "<mask>" {
				m["rstrip"] = true
			}
		}
		n := len(tok["model"].(map[string]any)["vocab"].([]any))
		more := []map[string]any{
			{"content": "hello", "single_word": true, "normalized": false, "special": false},
			{"content": "wörld", "single_word": false, "normalized": true, "special": false},
			{"content": "ＡＢ", "single_word": false, "normalized": true, "special": true, "lstrip": true},
			{"content": "日本", "single_word": false, "normalized": false, "special": false, "rstrip": true},
			{"content": "<s>x", "single_word": false, "normalized": false, "special": true},
		}
		for i, m := range more {
			m["id"] = n + i
			if _, ok := m["lstrip"]; !ok {
				m["lstrip"] = false
			}
			if _, ok := m["rstrip"]; !ok {
				m["rstrip"] = false
			}
			added = append(added, m)
		}
		tok["added_tokens"] = added
	}},
	{"byte-fallback-left", func(tok map[string]any) {
		mdl := tok["model"].(map[string]any)
		vocab := mdl["vocab"].([]any)
		for b := range 256 {
			vocab = append(vocab, []any{fmt.Sprintf("<0x%02X>", b), -20.0})
		}
		mdl["vocab"] = vocab
		mdl["byte_fallback"] = true
		tok["truncation"] = map[string]any{"direction": "Left", "max_length": 20, "strategy": "LongestFirst", "stride": 0}
	}},
}

// writeVariants writes each variant of base into dir and returns the paths.
func writeVariants(t testing.TB, base, dir string) []string {
	t.Helper()
	data, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, v := range variants {
		var tok map[string]any
		if err := json.Unmarshal(data, &tok); err != nil {
			t.Fatal(err)
		}
		v.mutate(tok)
		out, err := json.Marshal(tok)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "variant-"+v.name+".json")
		if err := os.WriteFile(p, out, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

func TestVariantsLoad(t *testing.T) {
	for _, p := range writeVariants(t, filepath.Join(tokenizersDir, "xlmr-unigram.json"), t.TempDir()) {
		tok, err := Load(p)
		if err != nil {
			t.Fatalf("%s: %v", filepath.Base(p), err)
		}
		if got := tok.Encode("hello wörld", Options{AddSpecialTokens: true}); len(got.IDs) < 3 {
			t.Errorf("%s: %v", filepath.Base(p), got)
		}
	}
}
