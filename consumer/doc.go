// Package consumer is jetembed's job loop: decode -> validate -> embed
// (tokenize, pack and run in the engine) -> encode -> publish -> settle. It
// decides, in one place, whether a delivery is ACKed, NAKed with a delay or
// TERMed, and it feeds JetStream deliveries and request-reply requests into
// the same engine queue so that their texts share packed runs.
//
// The loop ([Loop]) knows no NATS and no ONNX Runtime type: it defines the
// small interfaces it needs ([Message], [Publisher], [BlobStore],
// [Metrics]), takes an [engine.Embedder], and is tested with fakes; package
// jetstream adapts nats.go to it (jetstream.StartWorker runs one on a
// connection). It may import engine (the Embedder, Text and Embedding
// types, never the sessions), schema, internal/telemetry (span names, trace
// propagation and [NewMetrics]) and the OpenTelemetry trace and metric APIs.
//
// The outcome of every delivery is decided in one place (decide, in
// outcome.go) and carried out in one place (settle.go): success is ACKed
// only after its result is confirmed; bad input gets a DLQ copy, an error
// result and a TERM; a reply subject the [Config.Replies] policy refuses
// gets a DLQ copy (bad_reply) and a TERM and no result anywhere; retriable
// refusals are NAKed with a delay grown from the delivery count until
// MaxDeliver makes them final. Results carry the job's meta byte for byte
// and a dedupe id derived from the reply subject and the job id.
package consumer
