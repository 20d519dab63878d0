package consumer

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetembed/jetembed/internal/telemetry"
	"github.com/jetembed/jetembed/schema"
)

// TestTraceContext: the run span links to each producer's trace, each
// job's publish span continues its producer's trace and links to the run,
// and the result carries the trace on.
func TestTraceContext(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	// Two producers, each in its own trace.
	producers := map[string]trace.SpanContext{}
	r := newRig(t, Config{}, nil, nil)
	var msgs []*fakeMsg
	for _, id := range []string{"a", "b"} {
		pctx, span := tp.Tracer("producer").Start(context.Background(), "publish job")
		producers[id] = span.SpanContext()
		j := schema.NewJob(id, "text "+id)
		j.Reply = "r"
		d, m := delivery(t, j, schema.EncodingJSON, 1)
		telemetry.InjectHeaders(pctx, d.Header)
		span.End()
		if err := r.c.Submit(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	for _, m := range msgs {
		m.wait(t)
	}
	// The publish span ends after the ACK, before the budget is freed.
	waitFor(t, func() bool { return r.c.Stats().Held == 0 })

	// Each job is its own Embed call: one run span each, linked to its
	// producer.
	runs := map[string]sdktrace.ReadOnlySpan{}
	publish := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range exp.GetSpans().Snapshots() {
		switch s.Name() {
		case string(telemetry.SpanRun):
			for _, l := range s.Links() {
				for _, a := range l.Attributes {
					if a.Key == telemetry.AttrJobID {
						runs[a.Value.AsString()] = s
					}
				}
			}
		case string(telemetry.SpanPublish):
			for _, a := range s.Attributes() {
				if a.Key == telemetry.AttrJobID {
					publish[a.Value.AsString()] = s
				}
			}
		}
	}
	for id, sc := range producers {
		run := runs[id]
		if run == nil || len(run.Links()) != 1 || run.Links()[0].SpanContext.SpanID() != sc.SpanID() || len(run.Events()) != 1 {
			t.Fatalf("job %s: run span %v, want a link to its producer and one chunk event", id, run)
		}
		p := publish[id]
		if p == nil {
			t.Fatalf("no publish span for job %s", id)
		}
		if p.Parent().SpanID() != sc.SpanID() || p.SpanContext().TraceID() != sc.TraceID() {
			t.Errorf("job %s: publish span not a child of its producer", id)
		}
		if len(p.Links()) != 1 || p.Links()[0].SpanContext.SpanID() != run.SpanContext().SpanID() {
			t.Errorf("job %s: publish span does not link to the run", id)
		}
		_, pub := r.resultFor(t, id)
		got := trace.SpanContextFromContext(telemetry.ExtractHeaders(context.Background(), pub.header))
		if got.TraceID() != sc.TraceID() || got.SpanID() != p.SpanContext().SpanID() {
			t.Errorf("job %s: result headers carry trace %v, want the publish span of trace %v", id, got.TraceID(), sc.TraceID())
		}
	}
}
