package tokenizer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The differential test runs HuggingFace tokenizers itself (the Node oracle
// from make deps) over seeded random strings and compares every tokenizer
// file under testdata/tokenizers. It skips when node or the oracle is absent.

// randomAlphabet mixes what breaks tokenizers: several scripts, combining
// marks, ZWJ emoji parts, every kind of space and line break, controls,
// full-width forms, the Metaspace character and special-token syntax.
var randomAlphabet = []string{
	"a", "b", "e", "z", "A", "Q", "0", "7", " ", " ", " ", "  ", ".", ",", "'", "-", "_", "(", "/",
	"é", "ü", "ß", "ñ", "İ", "ı", "ǅ", "ﬁ", "Ⅻ", "½", "²", "™",
	"д", "Ж", "ё", "α", "Ω", "ς", "א", "ש", "ب", "ة", "ﻻ", "ह", "ि", "्", "क", "ত", "ா", "ก", "ำ", "ེ",
	"日", "本", "語", "中", "文", "あ", "カ", "ｶ", "ﾞ", "한", "ᄀ", "ᅡ", "ᆨ", "ｱ", "Ａ", "ｚ", "１", "！", "　",
	"\u0301", "\u0308", "\u0323", "\u20dd", "\u200d", "\u200c", "\u200b", "\u2060", "\ufeff", "\u00ad",
	"👍", "🏽", "❤", "\ufe0f", "🇫", "🇷", "👨", "👩", "🧑", "🚀", "🏳", "🌈", "\U000e0067",
	"\t", "\n", "\r", "\r\n", "\v", "\f", "\u0085", "\u00a0", "\u2028", "\u2029", "\u3000", "\u2009", "\u202f",
	"\x00", "\x01", "\x1b", "\x7f", "\u009f", "\ue000", "\ufffd", "\U0010fffd",
	"▁", "▁▁", "<s>", "</s>", "<pad>", "<unk>", "<mask>", "<", ">", "s",
}

// randomText is a seeded random string of up to n alphabet pieces.
func randomText(r *rand.Rand, n int) string {
	var b strings.Builder
	for range r.IntN(n + 1) {
		b.WriteString(randomAlphabet[r.IntN(len(randomAlphabet))])
	}
	return b.String()
}

// mutate cuts a piece of real text at random rune boundaries and splices
// alphabet pieces into it, so realistic words meet the hard characters.
func mutate(r *rand.Rand, s string) string {
	rs := []rune(s)
	if len(rs) > 300 {
		i := r.IntN(len(rs) - 300)
		rs = rs[i : i+300]
	}
	var b strings.Builder
	for _, c := range rs {
		if r.IntN(12) == 0 {
			b.WriteString(randomAlphabet[r.IntN(len(randomAlphabet))])
		}
		b.WriteRune(c)
	}
	return b.String()
}

func oracle(t *testing.T) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not found")
	}
	dir = os.Getenv("JETEMBED_HF_ORACLE")
	if dir == "" {
		dir = "../../.deps/hf-oracle"
	}
	if _, err := os.Stat(filepath.Join(dir, "encode.js")); err != nil {
		t.Skipf("HF oracle not found (JETEMBED_HF_ORACLE=%q)", dir)
	}
	return node, dir
}

func TestDifferentialRandom(t *testing.T) {
	node, dir := oracle(t)
	r := rand.New(rand.NewPCG(20261129, 1))
	n := 400
	if v, err := strconv.Atoi(os.Getenv("JETEMBED_TOKENIZER_DIFF_N")); err == nil && v > 0 {
		n = v // a longer local hunt; the default keeps the suite fast
	}
	corpus := parityCorpus(t)
	texts := make([]string, n)
	for i := range texts {
		if i%2 == 0 {
			texts[i] = randomText(r, []int{3, 10, 40, 200}[i/2%4])
		} else {
			texts[i] = mutate(r, corpus[r.IntN(len(corpus))])
		}
	}
	// Hand-written cases for the added-token flags of the variants.
	texts = append(texts, "hello world", "say hello", "sayhello there", "hello_x", "(hello)", "héllo hello",
		"a wörld b", "wo\u0308rld", "WÖRLD", "x  ＡＢ  y", "ＡＢ", "AB", "\u3000ＡＢ", "日本 語", "日本   x", "日本\n\ny",
		"<s>x y", "<s>", "   <mask>   z", "text<mask>", "\u3000<mask>\u3000", "<mask><mask>", " <s> </s> ",
		"Hello <mask>.", "hello\u00a0<mask>\u00a0hello")
	// Long runs that defeat grapheme, whitespace and lattice shortcuts.
	for _, unit := range []string{"a", "日", " ", "<s>", "\u0301", "\r\n", "👨\u200d", "🇫", " <mask>", "\x01", "ab ", "\u3000x", "ﾊﾞ", "\u0301\u0316\u0334\u0345", "각\u0301"} {
		texts = append(texts, "e"+strings.Repeat(unit, 4096))
	}
	files := tokenizerFiles(t)
	files = append(files, writeVariants(t, filepath.Join(tokenizersDir, "xlmr-unigram.json"), t.TempDir())...)
	// JETEMBED_TOKENIZER_EXTRA names more tokenizer files (a glob), e.g. the
	// real BGE-M3 tokenizer.json, to check live over the whole corpus too.
	if extra := os.Getenv("JETEMBED_TOKENIZER_EXTRA"); extra != "" {
		more, err := filepath.Glob(extra)
		if err != nil || len(more) == 0 {
			t.Fatalf("JETEMBED_TOKENIZER_EXTRA=%q matches no file (%v)", extra, err)
		}
		files = append(files, more...)
		texts = append(texts, corpus...)
	}
	inPath := writeTexts(t, t.TempDir(), texts)
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".json"), func(t *testing.T) {
			tok, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, mode := range []struct {
				args []string
				opt  Options
			}{
				{nil, Options{AddSpecialTokens: true}},
				{[]string{"--no-special", "--max-length", "16"}, Options{MaxTokens: 16}},
			} {
				if mode.args != nil && tok.truncLeft {
					// The oracle's --max-length resets the direction to right;
					// Options.MaxTokens keeps the file's.
					continue
				}
				want := oracleIDs(t, node, dir, path, inPath, len(texts), mode.args...)
				compareIDs(t, tok, texts, want, mode.opt, fmt.Sprint(mode.args))
			}
		})
	}
}

// writeTexts writes texts as the oracle's JSONL input ({"text": ...} lines)
// into dir and returns the file's path.
func writeTexts(t *testing.T, dir string, texts []string) string {
	t.Helper()
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for _, s := range texts {
		if err := enc.Encode(map[string]string{"text": s}); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(path, in.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// oracleIDs runs the HuggingFace oracle (encode.js in oracleDir) with
// tokenizer file tokPath over the n texts of inPath and returns their ids.
func oracleIDs(t *testing.T, node, oracleDir, tokPath, inPath string, n int, args ...string) [][]int32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmdArgs := append([]string{filepath.Join(oracleDir, "encode.js"), tokPath, inPath, "-", "--quiet"}, args...)
	out, err := exec.CommandContext(ctx, node, cmdArgs...).Output()
	if err != nil {
		t.Fatalf("oracle %v: %v", args, err)
	}
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	if len(lines) != n {
		t.Fatalf("oracle returned %d lines for %d texts", len(lines), n)
	}
	ids := make([][]int32, n)
	for i, line := range lines {
		var want struct {
			IDs []int32 `json:"ids"`
		}
		if err := json.Unmarshal(line, &want); err != nil {
			t.Fatal(err)
		}
		ids[i] = want.IDs
	}
	return ids
}

// compareIDs encodes every text with opt and reports the first few that
// differ from the oracle's ids, and the share that is identical.
func compareIDs(t *testing.T, tok *Tokenizer, texts []string, want [][]int32, opt Options, label string) {
	t.Helper()
	same, failed := 0, 0
	for i, text := range texts {
		got := tok.Encode(text, opt)
		if slices.Equal(got.IDs, want[i]) {
			same++
		} else if failed++; failed <= 5 {
			t.Errorf("%s text %q:\n%s", label, clip(text, 200), firstDiff(tok, got.IDs, want[i]))
		}
	}
	t.Logf("%s: %d/%d identical", label, same, len(texts))
}
