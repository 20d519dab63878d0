package tokenizer

import (
	"os"
	"path/filepath"
	"testing"
)

// benchTexts is about 1 MB of the multilingual parity corpus.
func benchTexts(b *testing.B) []string {
	b.Helper()
	corpus := parityCorpus(b)
	var texts []string
	size := 0
	for size < 1<<20 {
		for _, s := range corpus {
			texts = append(texts, s)
			size += len(s)
		}
	}
	return texts
}

// benchTokenizer is the XLM-R test tokenizer, or $JETEMBED_BENCH_TOKENIZER
// (scripts/bench-tokenizer.sh sets it).
func benchTokenizer(b *testing.B) *Tokenizer {
	b.Helper()
	path := os.Getenv("JETEMBED_BENCH_TOKENIZER")
	if path == "" {
		path = filepath.Join(tokenizersDir, "xlmr-unigram.json")
	} else if !filepath.IsAbs(path) {
		path = filepath.Join("..", "..", path)
	}
	tok, err := Load(path)
	if err != nil {
		b.Fatal(err)
	}
	return tok
}

func reportThroughput(b *testing.B, texts []string, tokens int) {
	bytes := 0
	for _, s := range texts {
		bytes += len(s)
	}
	b.SetBytes(int64(bytes))
	secs := b.Elapsed().Seconds()
	b.ReportMetric(float64(tokens)*float64(b.N)/secs, "tokens/s")
}

// BenchmarkEncodeSequential is one goroutine encoding ~1 MB text by text.
func BenchmarkEncodeSequential(b *testing.B) {
	benchCorpus(b, func(tok *Tokenizer, texts []string, opt Options) (n int) {
		for _, s := range texts {
			n += len(tok.Encode(s, opt).IDs)
		}
		return n
	})
}

// BenchmarkEncodeBatch is EncodeBatch over ~1 MB on every core.
func BenchmarkEncodeBatch(b *testing.B) {
	benchCorpus(b, func(tok *Tokenizer, texts []string, opt Options) (n int) {
		for _, e := range tok.EncodeBatch(texts, opt) {
			n += len(e.IDs)
		}
		return n
	})
}

// benchCorpus times encode over the ~1 MB benchmark corpus; encode returns
// the tokens it produced, which set the tokens/s metric.
func benchCorpus(b *testing.B, encode func(*Tokenizer, []string, Options) int) {
	tok, texts := benchTokenizer(b), benchTexts(b)
	opt := Options{AddSpecialTokens: true, MaxTokens: -1}
	tokens := 0
	b.ResetTimer()
	for i := range b.N {
		if n := encode(tok, texts, opt); i == 0 {
			tokens = n
		}
	}
	reportThroughput(b, texts, tokens)
}

// BenchmarkEncodeLongDocument is one document of the corpus past 8k tokens,
// cut to BGE-M3's 8192.
func BenchmarkEncodeLongDocument(b *testing.B) {
	tok, corpus := benchTokenizer(b), parityCorpus(b)
	doc := corpus[len(corpus)-1]
	opt := Options{AddSpecialTokens: true, MaxTokens: 8192}
	if n := tok.Encode(doc, opt).Count; n < 8192 {
		b.Fatalf("document has only %d tokens", n)
	}
	b.SetBytes(int64(len(doc)))
	b.ResetTimer()
	for range b.N {
		tok.Encode(doc, opt)
	}
}
