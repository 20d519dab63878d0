package tokenizer

import (
	"path/filepath"
	"testing"
)

// BenchmarkWordPiece measures the WordPiece model alone (single thread) on
// the words of the parity corpus as bert-base-uncased normalizes and
// pre-tokenizes them; tokens/s is the figure to compare.
func BenchmarkWordPiece(b *testing.B) {
	tok, err := Load(filepath.Join(tokenizersDir, "bert-base-uncased.json"))
	if err != nil {
		b.Fatal(err)
	}
	wp := tok.model.(*wordPiece)
	norm, pre := bertNormalizer{cleanText: true, handleChineseChars: true, stripAccents: true, lowercase: true}, bertPreTokenizer{}
	var words []string
	for _, s := range parityCorpus(b) {
		words = pre.preTokenize(words, norm.normalize(s))
	}
	ids := make([]int32, 0, 1024)
	tokens := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for _, w := range words {
			ids = wp.tokenize(ids[:0], w)
			tokens += len(ids)
		}
	}
	b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(float64(len(words)), "words/op")
}

// BenchmarkBertEncode measures the whole bert-base-uncased pipeline (added
// tokens, BertNormalizer, BertPreTokenizer, WordPiece, template) over the
// parity corpus, single thread, without truncation.
func BenchmarkBertEncode(b *testing.B) {
	tok, err := Load(filepath.Join(tokenizersDir, "bert-base-uncased.json"))
	if err != nil {
		b.Fatal(err)
	}
	texts := parityCorpus(b)
	tokens := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for _, s := range texts {
			tokens += len(tok.Encode(s, Options{AddSpecialTokens: true}).IDs)
		}
	}
	b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkBertNormalizer measures bert-base-uncased's normalizer (clean
// text, CJK padding, NFD and accent stripping, lowercase) over the parity
// corpus, single thread.
func BenchmarkBertNormalizer(b *testing.B) {
	n := bertNormalizer{cleanText: true, handleChineseChars: true, stripAccents: true, lowercase: true}
	texts := parityCorpus(b)
	size := 0
	for _, s := range texts {
		size += len(s)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		for _, s := range texts {
			n.normalize(s)
		}
	}
}
