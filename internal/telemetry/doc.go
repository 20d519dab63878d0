// Package telemetry is what operators see of a jetembed process: OpenTelemetry
// tracing with W3C trace context carried in NATS message headers, the
// jetembed_* metrics recorded through the OpenTelemetry metric API, the
// /healthz, /readyz and /metrics HTTP endpoints, and the structured logger
// with its heartbeat line.
//
// It uses the OpenTelemetry API only. The SDK, the span exporter chosen by
// the OTEL_* environment and the Prometheus exporter behind /metrics are
// wired by the sub-package export, which only cmd/jetembed imports; so the
// library packages that record here (consumer, jetstream) pull no SDK and
// no exporter.
//
// The consumer loop records through typed methods ([Metrics.JobDone],
// [Metrics.Run], ...) and starts spans from [Tracer] with this package's
// [SpanName]s and attribute helpers ([ChunkShape], [Job]); it never touches
// an instrument or an exporter. Texts and vectors are never
// recorded: attributes are counts, shapes, ids and error codes only.
//
// Headers are plain map[string][]string, which nats.Header converts to, so
// this package does not import nats.go. It imports nothing of the project
// except schema, for the error codes used as metric labels, and
// internal/tracehdr, the trace-header carrier it shares with package client.
package telemetry
