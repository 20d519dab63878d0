// Package tokenizer is a pure-Go implementation of the HuggingFace
// tokenizer.json pipeline (normalizers, pre-tokenizers, Unigram and
// WordPiece models, post-processors, added tokens, truncation), producing
// the same ids as HuggingFace tokenizers for the files jetembed supports.
// It imports nothing of the project.
package tokenizer
