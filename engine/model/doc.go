// Package model opens a jetembed model and checks it at start, so a wrong
// or partial model fails with a message naming the file instead of at the
// first request. A model is a directory (model.onnx, tokenizer.json,
// config.json, manifest.json and, for hidden-state exports, the BGE-M3 head
// weights), a Hugging Face snapshot laid out as the BAAI/bge-m3 repository
// is (the graph under onnx/ with external data, the heads as torch.save
// files), or a repo id resolved offline in the local Hugging Face cache.
//
// It is pure Go: the graph's interface is read from the ONNX protobuf
// without ONNX Runtime, and .pt heads without Python. [RewriteAttention]
// rewrites the same protobuf at load: the graph's attention blocks become
// ONNX Runtime's MultiHeadAttention, so the heads x S x S scores are never
// materialized; engine/ort runs it, after a canary against the graph.
//
// It may import internal/safetensors, internal/torchpt and the standard
// library; it imports no other project package.
package model
