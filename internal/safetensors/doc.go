// Package safetensors reads and writes the safetensors format (an 8-byte
// little-endian header length, a JSON header, then raw tensor bytes) for the
// float32 and float16 tensors jetembed's heads use. It imports nothing of the
// project.
package safetensors
