package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetembed/jetembed/internal/tracehdr"
)

// instrumentationName names the tracer and the meter of jetembed.
const instrumentationName = "github.com/jetembed/jetembed"

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

// tracingEnv are the variables of which at least one must be set for tracing
// to be on. Without them autoexport would still default to OTLP on
// localhost:4318 and log export errors forever on hosts without a collector.
var tracingEnv = []string{
	"OTEL_EXPORTER_OTLP_ENDPOINT",
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_TRACES_EXPORTER",
}

// propagator is used by [InjectHeaders] and [ExtractHeaders] whether or not
// [SetupTracing] ran, so that a process without an exporter still forwards
// its producers' trace context instead of cutting the trace.
var propagator = tracehdr.Propagator

// SetupTracing installs the global tracer provider with a span exporter
// configured by the standard OTEL_* environment variables (OTLP over HTTP or
// gRPC, console, none). Tracing is off, with the no-op provider, unless one of
// OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
// OTEL_TRACES_EXPORTER is set. The returned shutdown flushes pending spans;
// call it once, with a deadline, when the process stops.
func SetupTracing(ctx context.Context, serviceName, version string) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagator)
	noop := func(context.Context) error { return nil }
	if !tracingConfigured() {
		return noop, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("telemetry: span exporter: %w", err)
	}
	if autoexport.IsNoneSpanExporter(exp) {
		return noop, nil
	}
	// Attributes first and the environment after, so OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES override what the binary says about itself.
	res, err := resource.New(ctx,
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithAttributes(semconv.ServiceName(serviceName), semconv.ServiceVersion(version)),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithFromEnv(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, errors.Join(fmt.Errorf("telemetry: resource: %w", err), exp.Shutdown(ctx))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

func tracingConfigured() bool {
	for _, k := range tracingEnv {
		if os.Getenv(k) != "" {
			return true
		}
	}
	return false
}

// Tracer returns jetembed's tracer from the global provider, so spans go
// wherever [SetupTracing] (or a test) pointed it.
func Tracer() trace.Tracer {
	return otel.Tracer(instrumentationName)
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
