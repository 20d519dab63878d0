package engine

import "context"

// Embedder is what embeds texts for the layers above the engine: the job
// loop (package consumer), the fleet's wrapper and the bench take one.
// [*Engine] is one; [EmbedderFunc] makes one of a function. A wrapper that
// changes Embed embeds the Embedder it wraps, so the model id and the
// token limit pass through.
type Embedder interface {
	// Embed embeds texts in order; see [Engine.Embed].
	Embed(ctx context.Context, texts []Text) ([]Embedding, CallReport, error)
	// ModelID names the model in results (name@sha256-prefix); "" when
	// there is none to name.
	ModelID() string
	// MaxTokens is the longest text in tokens, special tokens included; 0
	// when the Embedder does not say.
	MaxTokens() int
}

var _ Embedder = (*Engine)(nil)

// EmbedderFunc is an [Embedder] of a function: no model id, no token limit.
type EmbedderFunc func(ctx context.Context, texts []Text) ([]Embedding, CallReport, error)

// Embed calls f.
func (f EmbedderFunc) Embed(ctx context.Context, texts []Text) ([]Embedding, CallReport, error) {
	return f(ctx, texts)
}

// ModelID is "".
func (EmbedderFunc) ModelID() string { return "" }

// MaxTokens is 0.
func (EmbedderFunc) MaxTokens() int { return 0 }
