// Package model opens a jetembed model directory (model.onnx, tokenizer.json,
// config.json, manifest.json and, for hidden-state exports, the BGE-M3 head
// weights) and checks it at start, so a wrong or partial directory fails
// with a message naming the file instead of at the first request.
//
// It is pure Go: the graph's inputs and outputs are read from model.onnx's
// protobuf without ONNX Runtime. [RewriteAttention] rewrites the same
// protobuf at load: the graph's attention blocks become ONNX Runtime's
// MultiHeadAttention, so the heads x S x S scores are never materialized;
// engine/ort runs it, after a canary against the graph.
//
// It may import internal/safetensors and the standard library; it imports
// no other project package.
package model
