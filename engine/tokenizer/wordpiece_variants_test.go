package tokenizer

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
)

// WordPiece variants: bert-base-uncased with the options the committed
// files do not use (cased, other accent settings, the other pre-tokenizers
// and Punctuation behaviors, the Bert/Roberta post-processors, another
// subword prefix and word limit). TestWordPieceVariants compares them with
// the HF oracle live over the parity corpus, seeded random texts, and texts
// made of every character on which HF's Unicode tables and Go's disagree.

func bertNorm(clean, chinese bool, strip any, lower bool) map[string]any {
	return map[string]any{"type": "BertNormalizer", "clean_text": clean, "handle_chinese_chars": chinese, "strip_accents": strip, "lowercase": lower}
}

func punctSeq(behavior string) map[string]any {
	return map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "WhitespaceSplit"},
		map[string]any{"type": "Punctuation", "behavior": behavior},
	}}
}

var wordPieceVariants = []variant{
	{"cased", func(tok map[string]any) { tok["normalizer"] = bertNorm(true, true, nil, false) }},
	{"cased-strip", func(tok map[string]any) { tok["normalizer"] = bertNorm(true, true, true, false) }},
	{"lower-nostrip", func(tok map[string]any) { tok["normalizer"] = bertNorm(true, true, false, true) }},
	{"raw", func(tok map[string]any) { tok["normalizer"] = bertNorm(false, false, false, false) }},
	{"nfd-strip-lower", func(tok map[string]any) {
		tok["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "NFD"}, map[string]any{"type": "StripAccents"}, map[string]any{"type": "Lowercase"},
		}}
	}},
	{"whitespace", func(tok map[string]any) { tok["pre_tokenizer"] = map[string]any{"type": "Whitespace"} }},
	{"punct-isolated", func(tok map[string]any) { tok["pre_tokenizer"] = punctSeq("Isolated") }},
	{"punct-removed", func(tok map[string]any) { tok["pre_tokenizer"] = punctSeq("Removed") }},
	{"punct-previous", func(tok map[string]any) { tok["pre_tokenizer"] = punctSeq("MergedWithPrevious") }},
	{"punct-next", func(tok map[string]any) { tok["pre_tokenizer"] = punctSeq("MergedWithNext") }},
	{"punct-contiguous", func(tok map[string]any) { tok["pre_tokenizer"] = punctSeq("Contiguous") }},
	{"bert-processing", func(tok map[string]any) {
		tok["post_processor"] = map[string]any{"type": "BertProcessing", "sep": []any{"[SEP]", 102}, "cls": []any{"[CLS]", 101}}
	}},
	{"roberta-processing", func(tok map[string]any) {
		tok["post_processor"] = map[string]any{"type": "RobertaProcessing", "sep": []any{"[unused1]", 2}, "cls": []any{"[unused0]", 1},
			"trim_offsets": true, "add_prefix_space": false}
	}},
	{"prefix-maxchars", func(tok map[string]any) {
		mdl := tok["model"].(map[string]any)
		vocab := map[string]any{}
		for k, v := range mdl["vocab"].(map[string]any) {
			if rest, ok := strings.CutPrefix(k, "##"); ok {
				k = "@@" + rest
			}
			vocab[k] = v
		}
		mdl["vocab"], mdl["continuing_subword_prefix"], mdl["max_input_chars_per_word"] = vocab, "@@", 8
	}},
}

// unicodeDisagreements is one "xCy" text per character, 32 to a line, for
// every character in planes 0-3 that HF classifies differently from Go's
// own tables: the cases bert_unicode_tables.go exists for.
func unicodeDisagreements() []string {
	in := func(r rune, ts ...*unicode.RangeTable) bool { return unicode.In(r, ts...) }
	var chars []rune
	for r := rune(0x80); r < 0x40000; r++ {
		if isHFPunct(r) != unicode.IsPunct(r) ||
			isHFOther(r) != in(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs) ||
			isHFNonspacingMark(r) != in(r, unicode.Mn) ||
			isHFCombiningMark(r) != in(r, unicode.M) ||
			isRegexWord(r) != (unicode.IsLetter(r) || in(r, unicode.M, unicode.Nd, unicode.Pc)) ||
			hfLowercaseExceptions[r] != "" {
			chars = append(chars, r)
		}
	}
	var texts []string
	for len(chars) > 0 {
		n := min(32, len(chars))
		var b strings.Builder
		for _, r := range chars[:n] {
			b.WriteString("x")
			b.WriteRune(r)
			b.WriteString("Y ")
		}
		texts = append(texts, b.String())
		chars = chars[n:]
	}
	return texts
}

var wordPieceHandCases = []string{
	"", " ", "\t\n", "[CLS] [MASK] [SEP]", "Hello [MASK].", "unaffable", "UNAFFABLE", "naïve café", "nai\u0308ve cafe\u0301",
	"İstanbul ΣΑΣ Straße", "中文字符和English混合", "ｆｕｌｌ　ｗｉｄｔｈ！", "a\u00a0b\u3000c\u2028d", "a\x00b\ufffdc\x07d\u200be",
	strings.Repeat("x", 101), strings.Repeat("ab", 50), "don't stop—believing...", "$100.00 + 5% = ?", "👨‍👩‍👧‍👦 🇫🇷 1️⃣",
	"한국어 텍스트", "こんにちは世界", "мир, привет!", "🫠 U+1FAE0",
}

func TestWordPieceVariants(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the HF oracle")
	}
	node, dir := oracle(t)
	texts := append(parityCorpus(t), wordPieceHandCases...)
	texts = append(texts, unicodeDisagreements()...)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		texts = append(texts, randomText(r, []int{5, 20, 80}[i%3]))
	}
	tmp := t.TempDir()
	inPath := writeTexts(t, tmp, texts)
	base, err := os.ReadFile(filepath.Join(tokenizersDir, "bert-base-uncased.json"))
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, v := range wordPieceVariants {
		var tok map[string]any
		if err := json.Unmarshal(base, &tok); err != nil {
			t.Fatal(err)
		}
		v.mutate(tok)
		data, err := json.Marshal(tok)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(tmp, "variant-"+v.name+".json")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	for _, path := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".json"), func(t *testing.T) {
			t.Parallel()
			tok, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			want := oracleIDs(t, node, dir, path, inPath, len(texts))
			compareIDs(t, tok, texts, want, Options{AddSpecialTokens: true}, "default")
		})
	}
}
