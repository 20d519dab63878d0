// Package consumer is jetembed's job loop: decode -> validate -> gather ->
// embed (tokenize, pack, run in the engine) -> encode -> publish -> ack. It
// decides, in one place, whether a delivery is ACKed, NAKed with a delay or
// TERMed, and it feeds JetStream deliveries and request-reply requests into
// the same scheduler so their texts share packed runs.
//
// consumer knows no NATS and no ONNX Runtime type: it defines the small
// interfaces it needs ([Message], [Publisher], [Embedder]) and is tested with
// fakes; package jetstream adapts nats.go to them.
package consumer
