package fleet

import (
	"context"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/schema"
)

// Embedder is what the job loop embeds through (jetstream.Embedder has the
// same method): [Wrap] takes one and returns one.
type Embedder interface {
	Embed(ctx context.Context, texts []engine.Text) ([]engine.Embedding, engine.CallReport, error)
}

// Wants records the chunk shapes the JIT guard refused, so that an idle
// member of the fleet compiles them and the refused jobs, NAKed with a
// delay, succeed on a later delivery. A [Member] is one. Want must not
// block: it is called on the batch path.
type Wants interface {
	Want(batch, seq int)
}

// Wrap returns an [Embedder] that embeds through emb and tells w the
// shape of every chunk refused with shape_not_warmed. The consumer's own
// handling of the refusal is unchanged (NAK with backoff, final result and
// DLQ after MaxDeliver); this only adds the record. The model id and the
// token limit emb reports are passed through.
func Wrap(emb Embedder, w Wants) Embedder {
	return &wantingEmbedder{emb: emb, w: w}
}

type wantingEmbedder struct {
	emb Embedder
	w   Wants
}

// Embed implements [Embedder].
func (e *wantingEmbedder) Embed(ctx context.Context, texts []engine.Text) ([]engine.Embedding, engine.CallReport, error) {
	embs, rep, err := e.emb.Embed(ctx, texts)
	if err != nil {
		return embs, rep, err
	}
	for _, ch := range rep.Chunks {
		if len(ch.Items) == 0 || ch.Items[0] < 0 || ch.Items[0] >= len(embs) {
			continue
		}
		// A refused chunk never ran, and all its items carry the refusal.
		if it := embs[ch.Items[0]].Err; it != nil && it.Code == schema.CodeShapeNotWarmed {
			e.w.Want(ch.Batch, ch.Seq)
		}
	}
	return embs, rep, nil
}

// ModelID passes on the wrapped Embedder's model id ("" if it has none).
func (e *wantingEmbedder) ModelID() string {
	if m, ok := e.emb.(interface{ ModelID() string }); ok {
		return m.ModelID()
	}
	return ""
}

// MaxTokens passes on the wrapped Embedder's token limit (0 if it has none).
func (e *wantingEmbedder) MaxTokens() int {
	if m, ok := e.emb.(interface{ MaxTokens() int }); ok {
		return m.MaxTokens()
	}
	return 0
}
