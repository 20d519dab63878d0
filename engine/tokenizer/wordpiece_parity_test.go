package tokenizer

import (
	"path/filepath"
	"testing"
)

// TestWordPieceCorpusParity checks bert-base-uncased against HF's ids on
// testdata/parity/wordpiece-corpus.jsonl: what the shared corpus lacks for
// BERT (literal [CLS]/[MASK] text, long words, case and accent corners) and
// one text per 32 characters on which HF's Unicode tables and Go's disagree.
// The expectations come from the oracle:
//
//	node $JETEMBED_HF_ORACLE/encode.js testdata/tokenizers/bert-base-uncased.json \
//	    engine/tokenizer/testdata/parity/wordpiece-corpus.jsonl - [--no-special]
//
// reduced to {"ids": [...]} lines.
func TestWordPieceCorpusParity(t *testing.T) {
	type line struct {
		Text string `json:"text"`
	}
	var texts []string
	for _, l := range readJSONL[line](t, filepath.Join(parityDir, "wordpiece-corpus.jsonl")) {
		texts = append(texts, l.Text)
	}
	tok, err := Load(filepath.Join(tokenizersDir, "bert-base-uncased.json"))
	if err != nil {
		t.Fatal(err)
	}
	for mode, opt := range parityModes {
		if mode != "default" && mode != "nospecial" {
			continue
		}
		t.Run(mode, func(t *testing.T) {
			checkParity(t, tok, texts, filepath.Join(parityDir, "wordpiece-corpus.bert-base-uncased."+mode+".expected.jsonl"), opt)
		})
	}
}
