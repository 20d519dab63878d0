// Package consumer is jetembed's job loop: decode -> validate -> gather ->
// embed (tokenize, pack, run in the engine) -> encode -> publish -> ack. It
// decides, in one place, whether a delivery is ACKed, NAKed with a delay or
// TERMed, and it feeds JetStream deliveries and request-reply requests into
// the same scheduler so their texts share packed runs.
//
// consumer knows no NATS and no ONNX Runtime type: it defines the small
// interfaces it needs ([Message], [Publisher], [Embedder]) and is tested with
// fakes; package jetstream adapts nats.go to them. It is internal: a Go
// program runs it through jetstream.StartWorker, whose configuration names
// the types it needs through aliases (jetstream.ConsumerConfig, Embedder,
// Delivery). It may import engine (for the Text and Embedding types, not
// to run sessions), schema, internal/telemetry (the outcome labels of
// [Metrics], span names and trace propagation) and the OpenTelemetry trace
// API.
//
// The outcome of every delivery is decided in one place (decide, in
// outcome.go) and carried out in one place (settle.go): success is ACKed only
// after its result is confirmed; bad input gets a DLQ copy, an error result
// and a TERM; a reply subject the [Config.Replies] policy refuses gets a DLQ
// copy (bad_reply) and a TERM and no result anywhere; retriable refusals are
// NAKed with a delay grown from the delivery count until MaxDeliver makes
// them final. Results carry the job's meta byte for byte and a dedupe id
// derived from the reply subject and the job id.
package consumer
