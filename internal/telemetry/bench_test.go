package telemetry

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/jetembed/jetembed/schema"
)

// The consumer records a handful of metrics per job and per chunk; these
// keep that cost visible (ns and allocations per call).

func benchMetrics(b *testing.B) *Metrics {
	b.Helper()
	mp := sdkmetric.NewMeterProvider()
	m, err := NewMetrics(mp)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return m
}

func BenchmarkJobDone(b *testing.B) {
	m, ctx := benchMetrics(b), context.Background()
	b.ReportAllocs()
	for b.Loop() {
		m.JobDone(ctx, schema.OutcomeOK, "")
		m.TextsDone(ctx, schema.OutcomeError, schema.CodeTextTooLong, 3)
	}
}

func BenchmarkRunChunk(b *testing.B) {
	m, ctx := benchMetrics(b), context.Background()
	b.ReportAllocs()
	for b.Loop() {
		m.Run(ctx, "gpu0", 3*time.Millisecond)
		m.Chunk(ctx, 8, 512)
		m.Tokens(ctx, 3000, 4096)
	}
}

func BenchmarkInjectExtract(b *testing.B) {
	exp := ctxWithSpan(b)
	b.ReportAllocs()
	for b.Loop() {
		h := map[string][]string{}
		InjectHeaders(exp, h)
		_ = ExtractHeaders(context.Background(), h)
	}
}

// ctxWithSpan returns a context carrying a valid remote span context, as a
// consumer sees after extracting a producer's headers.
func ctxWithSpan(b *testing.B) context.Context {
	b.Helper()
	h := map[string][]string{"traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
	return ExtractHeaders(context.Background(), h)
}
