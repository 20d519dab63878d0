package tokenizer

// Backend is what both tokenizer implementations offer: the pure-Go
// [Tokenizer] and, with the hftokenizers build tag, [HFTokenizer] (the Rust
// HuggingFace library through github.com/daulet/tokenizers).
type Backend interface {
	Encode(text string, opt Options) Encoding
	EncodeBatch(texts []string, opt Options) []Encoding
	VocabSize() int
	MaxTokens() int
}

var _ Backend = (*Tokenizer)(nil)
