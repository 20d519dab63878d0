// Package tokenizer is a pure-Go implementation of the HuggingFace
// tokenizer.json pipeline (normalizers, pre-tokenizers, Unigram and
// WordPiece models, post-processors, added tokens, truncation), producing
// the same ids as HuggingFace tokenizers for the files jetembed supports.
//
// The pipeline per text is HF's: added tokens are split off the raw text,
// each remaining piece is normalized, added tokens marked normalized are
// split off the result, then the pre-tokenizer cuts words and the model
// turns each word into ids; truncation and the post-processor come last.
// Offsets are not tracked. A file naming a component that is not
// implemented fails to load with [ErrUnsupported].
//
// Parity with HF is checked three ways: the committed corpus and
// expectations (testdata/parity, made by scripts/gen-tokenizer-testdata.sh),
// a live differential test against the HF oracle over random strings and
// option variants, and FuzzEncode for the invariants.
//
// The optional [HFTokenizer] (build tag hftokenizers) wraps the Rust
// library through github.com/daulet/tokenizers behind the same [Backend].
//
// It imports nothing of the project; outside the standard library it uses
// golang.org/x/text (Unicode normalization) and github.com/rivo/uniseg
// (grapheme clusters for the Precompiled normalizer).
package tokenizer
