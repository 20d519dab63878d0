// Package engine turns texts into BGE-M3 dense, sparse and ColBERT vectors:
// it tokenizes once per call, bin-packs the texts of a call into padded
// chunks, spreads the chunks over a pool of ONNX Runtime sessions, applies
// the heads and reassembles results in input order. It also owns warm-up,
// the TensorRT JIT guard and the circuit breaker.
//
// engine knows nothing of NATS; it may import schema (for error codes) and
// its own subpackages. ONNX Runtime (cgo) is confined to engine/ort.
package engine
