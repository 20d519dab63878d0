package export

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetembed/jetembed/internal/telemetry"
)

func TestSetupTracingOff(t *testing.T) {
	for _, k := range tracingEnv {
		t.Setenv(k, "")
	}
	prev := otel.GetTracerProvider()
	shutdown, err := SetupTracing(context.Background(), "jetembed", "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if otel.GetTracerProvider() != prev {
		t.Error("SetupTracing without OTEL_* variables replaced the tracer provider")
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	if _, err := SetupTracing(context.Background(), "jetembed", "test"); err != nil {
		t.Fatal(err)
	}
	if otel.GetTracerProvider() != prev {
		t.Error("OTEL_TRACES_EXPORTER=none installed a tracer provider")
	}
}

// TestSetupTracingOTLP runs the real OTLP/HTTP exporter against a loopback
// collector and checks that a span reaches it by shutdown.
func TestSetupTracingOTLP(t *testing.T) {
	var posts atomic.Int32
	var service atomic.Bool
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" {
			posts.Add(1)
			// The protobuf carries resource strings verbatim.
			if bytes.Contains(body, []byte("jetembed-test")) && bytes.Contains(body, []byte("fetch")) {
				service.Store(true)
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	for _, k := range tracingEnv {
		t.Setenv(k, "")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_SERVICE_NAME", "")
	prev := otel.GetTracerProvider()
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	shutdown, err := SetupTracing(context.Background(), "jetembed-test", "v0")
	if err != nil {
		t.Fatal(err)
	}
	_, span := telemetry.Tracer().Start(context.Background(), string(telemetry.SpanFetch), trace.WithAttributes(telemetry.Job("job-1", 3)...))
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if posts.Load() == 0 {
		t.Fatal("no OTLP export reached the collector")
	}
	if !service.Load() {
		t.Error("exported spans lack the service name or the span name")
	}
}
