// Package ort runs jetembed's ONNX graphs with ONNX Runtime: it finds and
// loads the shared library ([Init]), builds execution provider options
// (CPU, CUDA, TensorRT; [Provider]) and opens a [Session] per model that
// implements engine.Runner. [PlanAttention] decides once per model whether
// sessions run the model's graph or its attention rewrite
// ([Provider.Attention]; the flash kernel's conditions, a canary run).
//
// It is the one place of the project with ONNX Runtime cgo. The cgo files
// are built only with cgo; without it a twin returns [ErrNoCgo], so pure-Go
// builds and tests still work. Provider options and library search are pure
// Go and tested everywhere.
//
// ort may import engine (for RunInput and RunOutput) and engine/model; the
// engine root never imports ort — cmd wires a Session into the engine.
package ort
