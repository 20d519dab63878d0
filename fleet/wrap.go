package fleet

import (
	"context"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/schema"
)

// Wants records the chunk shapes the JIT guard refused, so that an idle
// member of the fleet compiles them and the refused jobs, NAKed with a
// delay, succeed on a later delivery. A [Member] is one. Want must not
// block: it is called on the batch path.
type Wants interface {
	Want(batch, seq int)
}

// Wrap returns an [engine.Embedder] that embeds through emb and tells w the
// shape of every chunk refused with shape_not_warmed. The consumer's own
// handling of the refusal is unchanged (NAK with backoff, final result and
// DLQ after MaxDeliver); this only adds the record. The model id and the
// token limit emb reports are passed through.
func Wrap(emb engine.Embedder, w Wants) engine.Embedder {
	return &wantingEmbedder{Embedder: emb, w: w}
}

type wantingEmbedder struct {
	engine.Embedder // ModelID and MaxTokens pass through
	w               Wants
}

// Embed implements [engine.Embedder].
func (e *wantingEmbedder) Embed(ctx context.Context, texts []engine.Text, call engine.Call) ([]engine.Embedding, engine.CallReport, error) {
	embs, rep, err := e.Embedder.Embed(ctx, texts, call)
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
