package telemetry

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetembed/jetembed/internal/tracehdr"
)

// InstrumentationName names the tracer and the meter of jetembed.
const InstrumentationName = "github.com/jetembed/jetembed"

// SpanName is the name of one stage of the consumer pipeline.
type SpanName string

// The spans of one fetched batch. A job's trace starts at the producer (its
// context arrives in the message headers) and continues through these.
const (
	SpanFetch    SpanName = "fetch"
	SpanTokenize SpanName = "tokenize"
	SpanPack     SpanName = "pack"
	SpanRun      SpanName = "run"
	SpanPublish  SpanName = "publish"
)

// Tracer returns jetembed's tracer from the global provider, so spans go
// wherever the process (export.SetupTracing in cmd/jetembed) or a test
// pointed it; with none, it is the no-op tracer.
func Tracer() trace.Tracer {
	return otel.Tracer(InstrumentationName)
}

// Attribute keys of jetembed spans.
const (
	AttrJobID       = attribute.Key("jetembed.job.id")
	AttrTexts       = attribute.Key("jetembed.texts")
	AttrTokens      = attribute.Key("jetembed.tokens")
	AttrChunkBatch  = attribute.Key("jetembed.chunk.batch")
	AttrChunkSeq    = attribute.Key("jetembed.chunk.seq")
	AttrChunkTokens = attribute.Key("jetembed.chunk.padded_tokens")
	AttrSession     = attribute.Key("jetembed.session")
	AttrErrorCode   = attribute.Key("jetembed.error.code")
)

// ChunkShape describes one session run: batch rows, padded sequence length
// and the session (GPU or CPU worker) that ran it.
func ChunkShape(batch, seq int, session string) []attribute.KeyValue {
	return []attribute.KeyValue{
		AttrChunkBatch.Int(batch),
		AttrChunkSeq.Int(seq),
		AttrChunkTokens.Int(batch * seq),
		AttrSession.String(session),
	}
}

// Job describes one job by its id and the number of texts it carries.
func Job(id string, texts int) []attribute.KeyValue {
	return []attribute.KeyValue{AttrJobID.String(id), AttrTexts.Int(texts)}
}

// InjectHeaders writes the trace context of ctx (traceparent, tracestate,
// baggage) into h, typically a nats.Header about to be published. A nil h is
// left alone: there is nowhere to write.
func InjectHeaders(ctx context.Context, h map[string][]string) { tracehdr.Inject(ctx, h) }

// ExtractHeaders returns ctx carrying the remote span context found in h, so
// spans started from it join the producer's trace. Without trace headers it
// returns ctx unchanged.
func ExtractHeaders(ctx context.Context, h map[string][]string) context.Context {
	return tracehdr.Extract(ctx, h)
}
