// Package engine turns texts into BGE-M3 dense, sparse and ColBERT vectors.
// An [Engine] tokenizes each call's texts once and puts them in one queue
// shared by every call in flight (interactive before bulk, with aging); a
// session that frees pulls the next chunk, formed then from the waiting
// texts of all calls under the token, latency and memory budgets of its
// cost model, and a call returns as soon as its own texts are done. It
// applies the heads, and owns admission, warm-up, the TensorRT JIT guard
// and the circuit breaker. [Embedder] is what the layers above embed
// through; *Engine is one.
//
// engine knows nothing of NATS. It may import schema (its items fail with
// schema's error codes), engine/model and engine/tokenizer (the model
// directory and the tokenizer it runs), its internal packs and heads, and
// internal/safetensors; ONNX Runtime (cgo) is confined to engine/ort,
// which implements [Runner].
package engine
