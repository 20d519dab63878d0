package consumer

import (
	"context"
	"errors"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/internal/telemetry"
	"github.com/jetembed/jetembed/schema"
)

// A job's trace starts at its producer, whose context arrives in the
// message headers. The run span of a batch serves many jobs, so it cannot be
// a child of each: it links to them instead, and each job's publish span is
// a child of its producer's span that links back to the run.

// verdictKey is the span attribute of a job's verdict: ack, nak or term.
const verdictKey = attribute.Key("jetembed.verdict")

// producer returns ctx carrying the trace context of the job's producer.
func (j *job) producer(ctx context.Context) context.Context {
	return telemetry.ExtractHeaders(ctx, j.d.Header)
}

// startRun starts the span of one Embed call, linked to the trace of every
// job it serves.
func startRun(ctx context.Context, jobs []*job, texts int) (context.Context, trace.Span) {
	var links []trace.Link
	for _, j := range jobs {
		if sc := trace.SpanContextFromContext(j.producer(context.Background())); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{telemetry.AttrJobID.String(j.id)}})
		}
	}
	return telemetry.Tracer().Start(ctx, string(telemetry.SpanRun), trace.WithLinks(links...),
		trace.WithAttributes(telemetry.AttrTexts.Int(texts)))
}

// endRun records the chunks of the call (or its failure) and ends span.
func endRun(span trace.Span, rep engine.CallReport, err error) {
	for _, ch := range rep.Chunks {
		span.AddEvent("chunk", trace.WithAttributes(telemetry.ChunkShape(ch.Batch, ch.Seq, strconv.Itoa(ch.Session))...))
	}
	span.SetAttributes(telemetry.AttrTokens.Int(rep.Tokens), telemetry.AttrChunkTokens.Int(rep.PaddedTokens))
	if err != nil {
		span.SetStatus(codes.Error, "embed failed")
		var se *schema.Error
		if errors.As(err, &se) {
			span.SetAttributes(telemetry.AttrErrorCode.String(string(se.Code)))
		}
	}
	span.End()
}

// startPublish starts the span that settles one job, as a child of its
// producer's span, linked to the run that computed it (if any).
func (j *job) startPublish(ctx context.Context) (context.Context, trace.Span) {
	texts := 0
	if j.wire != nil {
		texts = len(j.wire.Texts)
	}
	opts := []trace.SpanStartOption{trace.WithAttributes(telemetry.Job(j.id, texts)...)}
	if j.run.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: j.run}))
	}
	return telemetry.Tracer().Start(j.producer(ctx), string(telemetry.SpanPublish), opts...)
}

// endPublish records the outcome and ends span.
func endPublish(span trace.Span, out outcome) {
	span.SetAttributes(verdictKey.String(out.verdict.String()))
	if out.code != "" {
		span.SetAttributes(telemetry.AttrErrorCode.String(string(out.code)))
	}
	if out.verdict != verdictAck {
		span.SetStatus(codes.Error, out.verdict.String())
	}
	span.End()
}
