package onnxgen

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// fakeTokenizer is a tokenizer.json in the XLM-R unigram shape with n
// pieces, <mask> last as an added token; only its vocabulary size matters.
func fakeTokenizer(tb testing.TB, n int) []byte {
	tb.Helper()
	vocab := make([][]any, n-1)
	for i := range vocab {
		vocab[i] = []any{fmt.Sprintf("▁p%d", i), -float64(i) / 100}
	}
	b, err := json.Marshal(map[string]any{
		"version":      "1.0",
		"added_tokens": []map[string]any{{"id": 0, "content": "<s>"}, {"id": n - 1, "content": "<mask>"}},
		"model":        map[string]any{"type": "Unigram", "unk_id": 3, "vocab": vocab},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// tokenizerForTests is the committed XLM-R tokenizer when present, else a
// fake one of about its size.
func tokenizerForTests(tb testing.TB) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "tokenizers", "xlmr-unigram.json"))
	if err == nil {
		return b
	}
	return fakeTokenizer(tb, 8002)
}

// genDir writes a model directory into a fresh temporary directory.
func genDir(tb testing.TB, c Config) string {
	tb.Helper()
	dir := tb.TempDir()
	if err := WriteDir(dir, c, tokenizerForTests(tb)); err != nil {
		tb.Fatal(err)
	}
	return dir
}
