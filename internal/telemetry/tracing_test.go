package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// useRecorder points the global tracer provider at an in-memory exporter for
// one test and restores the previous provider after it.
func useRecorder(t *testing.T) *tracetest.InMemoryExporter {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() {
		otel.SetTracerProvider(prev)
		_ = tp.Shutdown(context.Background())
	})
	return exp
}

func TestTracePropagationThroughHeaders(t *testing.T) {
	exp := useRecorder(t)

	// Producer side: a span around the publish, its context in the headers.
	pctx, parent := Tracer().Start(context.Background(), "producer publish")
	header := map[string][]string{"Nats-Msg-Id": {"job-1"}}
	InjectHeaders(pctx, header)
	parent.End()
	if len(header["traceparent"]) != 1 {
		t.Fatalf("no traceparent injected: %v", header)
	}

	// Consumer side, with nothing but the headers.
	cctx := ExtractHeaders(context.Background(), header)
	_, run := Tracer().Start(cctx, string(SpanRun), trace.WithAttributes(ChunkShape(4, 128, "gpu0")...))
	run.End()

	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("recorded %d spans, want 2", len(spans))
	}
	p, c := spans[0], spans[1]
	if c.Name != "run" {
		t.Errorf("child span name %q, want run", c.Name)
	}
	if c.SpanContext.TraceID() != p.SpanContext.TraceID() {
		t.Errorf("child trace id %s, want the parent's %s", c.SpanContext.TraceID(), p.SpanContext.TraceID())
	}
	if c.Parent.SpanID() != p.SpanContext.SpanID() || !c.Parent.IsRemote() {
		t.Errorf("child parent %s (remote %v), want remote %s", c.Parent.SpanID(), c.Parent.IsRemote(), p.SpanContext.SpanID())
	}
	want := map[attribute.Key]int64{AttrChunkBatch: 4, AttrChunkSeq: 128, AttrChunkTokens: 512}
	for _, a := range c.Attributes {
		if w, ok := want[a.Key]; ok {
			if a.Value.AsInt64() != w {
				t.Errorf("%s = %d, want %d", a.Key, a.Value.AsInt64(), w)
			}
			delete(want, a.Key)
		}
	}
	if len(want) != 0 {
		t.Errorf("run span lacks attributes %v", want)
	}
}

func TestExtractHeadersCanonicalKey(t *testing.T) {
	exp := useRecorder(t)
	pctx, parent := Tracer().Start(context.Background(), "gateway")
	h := map[string][]string{}
	InjectHeaders(pctx, h)
	parent.End()
	// An HTTP gateway in between may canonicalize the header name.
	h2 := map[string][]string{"Traceparent": h["traceparent"]}
	sc := trace.SpanContextFromContext(ExtractHeaders(context.Background(), h2))
	if sc.TraceID() != exp.GetSpans()[0].SpanContext.TraceID() {
		t.Errorf("canonical Traceparent not extracted: got trace %s", sc.TraceID())
	}
}

func TestHeadersWithoutTrace(t *testing.T) {
	ctx := context.Background()
	if got := ExtractHeaders(ctx, nil); got != ctx {
		t.Error("ExtractHeaders(nil) changed the context")
	}
	if sc := trace.SpanContextFromContext(ExtractHeaders(ctx, map[string][]string{"Content-Type": {"application/json"}})); sc.IsValid() {
		t.Errorf("span context from headers without traceparent: %v", sc)
	}
	InjectHeaders(ctx, nil) // must not panic
	h := map[string][]string{}
	InjectHeaders(ctx, h) // no span in ctx: nothing to carry
	if len(h) != 0 {
		t.Errorf("headers after injecting an empty context: %v", h)
	}
}
