package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/internal/telemetry"
	"github.com/jetembed/jetembed/schema"
)

// TestOpsTraceSubmitToRun submits a job inside a producer span and checks
// that the trace crossed NATS in the headers: the consumer's run span
// (which serves many jobs, so it is a root of its own) links to the submit
// span, and the job's publish span is a child of the submit span that
// links back to the run.
func TestOpsTraceSubmitToRun(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER"} {
		t.Setenv(k, "") // serve then keeps the provider installed below
	}
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	defer func() {
		otel.SetTracerProvider(prev)
		_ = tp.Shutdown(context.Background())
	}()

	srv := natstest.RunServer(t)
	s := startOps(t, srv.ClientURL())
	s.waitReady(t)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc, client.WithRun("traced"))
	if err != nil {
		t.Fatal(err)
	}
	results, err := nc.SubscribeSync("embed.results.traced.>")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sctx, span := tp.Tracer("ops-test").Start(ctx, "submit")
	if _, err := c.Submit(sctx, schema.NewJob("traced-1", "a traced text", "and another")); err != nil {
		t.Fatal(err)
	}
	span.End()
	m, err := results.NextMsg(20 * time.Second)
	if err != nil {
		t.Fatalf("waiting for the result: %v", err)
	}
	checkVectors(t, decodeMsg(t, m), 2)
	checkTrace(t, spans, span.SpanContext())
}

// linksTo reports whether sp has a link to the span of sc.
func linksTo(sp tracetest.SpanStub, sc trace.SpanContext) bool {
	for _, l := range sp.Links {
		if l.SpanContext.TraceID() == sc.TraceID() && l.SpanContext.SpanID() == sc.SpanID() {
			return true
		}
	}
	return false
}

// checkTrace finds the consumer's run span linked to the producer's submit
// span, and the job's publish span under the submit span linked to that
// run.
func checkTrace(t *testing.T, spans *tracetest.InMemoryExporter, submit trace.SpanContext) {
	t.Helper()
	// Spans end (and are exported) around the result's publish.
	natstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		var run, publish *tracetest.SpanStub
		var seen []string
		got := spans.GetSpans()
		for i, sp := range got {
			seen = append(seen, fmt.Sprintf("%s(trace %s parent %s, %d links)", sp.Name, sp.SpanContext.TraceID(), sp.Parent.SpanID(), len(sp.Links)))
			if sp.Name == string(telemetry.SpanRun) && linksTo(sp, submit) {
				run = &got[i]
			}
		}
		if run == nil {
			return fmt.Errorf("no %q span links to the submit span %s/%s; spans: %s",
				telemetry.SpanRun, submit.TraceID(), submit.SpanID(), strings.Join(seen, ", "))
		}
		for i, sp := range got {
			if sp.Name == string(telemetry.SpanPublish) && sp.Parent.SpanID() == submit.SpanID() &&
				sp.SpanContext.TraceID() == submit.TraceID() && linksTo(sp, run.SpanContext) {
				publish = &got[i]
			}
		}
		if publish == nil {
			return fmt.Errorf("no %q span in the submit's trace, child of the submit span and linked to the run %s; spans: %s",
				telemetry.SpanPublish, run.SpanContext.SpanID(), strings.Join(seen, ", "))
		}
		return nil
	})
}
