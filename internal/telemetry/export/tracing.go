package export

import (
	"context"
	"errors"
	"fmt"
	"os"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/jetembed/jetembed/internal/tracehdr"
)

// tracingEnv are the variables of which at least one must be set for tracing
// to be on. Without them autoexport would still default to OTLP on
// localhost:4318 and log export errors forever on hosts without a collector.
var tracingEnv = []string{
	"OTEL_EXPORTER_OTLP_ENDPOINT",
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_TRACES_EXPORTER",
}

// SetupTracing installs the global tracer provider with a span exporter
// configured by the standard OTEL_* environment variables (OTLP over HTTP or
// gRPC, console, none). Tracing is off, with the no-op provider, unless one of
// OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
// OTEL_TRACES_EXPORTER is set. The returned shutdown flushes pending spans;
// call it once, with a deadline, when the process stops.
func SetupTracing(ctx context.Context, serviceName, version string) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(tracehdr.Propagator)
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
