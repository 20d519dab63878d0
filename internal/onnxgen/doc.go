// Package onnxgen writes small BGE-M3-shaped test models: a real XLM-R style
// transformer encoder (token and position embeddings with the XLM-R padding
// offset, post-LN masked multi-head self-attention layers with an Erf GELU
// feed-forward) with seeded random weights, in either export layout the
// engine loads — hidden-state (last_hidden_state plus the heads as
// safetensors) or three-head (dense_vecs, sparse_vecs, colbert_vecs computed
// in the graph). Real BGE-M3 weights cannot be shipped with the tests; these
// models have the same interface, dynamic batch and sequence axes and the
// same 8194 position limit, so every engine path runs against them.
//
// The ONNX ModelProto is encoded directly with protowire: the output is
// byte-for-byte reproducible for the same [Config].
//
// onnxgen may import internal/safetensors and the standard library; it knows
// nothing of ONNX Runtime (only its tests run the models).
package onnxgen
