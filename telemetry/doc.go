// Package telemetry is what operators see of a jetembed process: OpenTelemetry
// tracing with W3C trace context carried in NATS message headers, Prometheus
// metrics recorded through the OpenTelemetry SDK, the /healthz, /readyz and
// /metrics HTTP endpoints, and the structured logger with its heartbeat line.
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
