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

	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
	"github.com/jetembed/jetembed/telemetry"
)

// TestOpsTraceSubmitToRun submits a job inside a producer span and checks
// that the consumer's run span joins that trace, its parents leading back
// to the submit span: the W3C context crossed NATS in the headers.
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
	c, err := jetstream.NewClient(nc, jetstream.WithRun("traced"))
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

// checkTrace finds the consumer's run span in the producer's trace and
// follows its parents back to the producer's submit span.
func checkTrace(t *testing.T, spans *tracetest.InMemoryExporter, submit trace.SpanContext) {
	var byID map[trace.SpanID]tracetest.SpanStub
	var run *tracetest.SpanStub
	// Spans end (and are exported) after the result is published.
	natstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		byID = map[trace.SpanID]tracetest.SpanStub{}
		run = nil
		for _, sp := range spans.GetSpans() {
			byID[sp.SpanContext.SpanID()] = sp
			if sp.SpanContext.TraceID() == submit.TraceID() && sp.Name == string(telemetry.SpanRun) {
				run = &sp
			}
		}
		if run == nil {
			var names []string
			for _, sp := range byID {
				names = append(names, fmt.Sprintf("%s(trace %s)", sp.Name, sp.SpanContext.TraceID()))
			}
			return fmt.Errorf("no %q span in the submit's trace %s; spans: %v", telemetry.SpanRun, submit.TraceID(), names)
		}
		return nil
	})
	chain := []string{run.Name}
	for sp := *run; ; {
		parent := sp.Parent.SpanID()
		if parent == submit.SpanID() {
			t.Logf("trace: submit <- %s", strings.Join(chain, " <- "))
			return
		}
		next, ok := byID[parent]
		if !sp.Parent.IsValid() || !ok {
			t.Fatalf("run span's ancestors %v do not lead to the submit span %s (stopped at parent %s)", chain, submit.SpanID(), parent)
		}
		chain = append(chain, next.Name)
		sp = next
	}
}
