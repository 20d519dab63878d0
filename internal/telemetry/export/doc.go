// Package export wires jetembed's telemetry to the OpenTelemetry SDK: the
// span exporter chosen by the OTEL_* environment ([SetupTracing]) and the
// meter provider whose metrics /metrics serves in the Prometheus format
// ([NewPrometheus]).
//
// It is the only package that pulls the SDK and the exporters, and only
// cmd/jetembed imports it: the library packages (consumer, jetstream,
// engine, ...) record through package telemetry, which uses the
// OpenTelemetry API alone, so a Go program that embeds them chooses its
// own SDK or none. It imports internal/telemetry and internal/tracehdr.
package export
