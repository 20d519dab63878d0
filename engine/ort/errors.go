package ort

import "errors"

// Errors of this package; compare them with errors.Is.
var (
	// ErrNoCgo means the binary was built without cgo, so ONNX Runtime
	// cannot be loaded.
	ErrNoCgo = errors.New("onnx runtime unavailable: jetembed was built without cgo (CGO_ENABLED=0)")
	// ErrLibraryNotFound means no ONNX Runtime shared library was found.
	ErrLibraryNotFound = errors.New("onnx runtime library not found")
	// ErrVersion means the library is older than this build supports.
	ErrVersion = errors.New("onnx runtime library too old")
	// ErrProvider means an execution provider is misconfigured or cannot be
	// registered; a GPU request never falls back to the CPU silently.
	ErrProvider = errors.New("execution provider unavailable")
	// ErrInput means a RunInput is inconsistent (lengths, shape).
	ErrInput = errors.New("ort: bad run input")
	// ErrClosed means the session was closed.
	ErrClosed = errors.New("ort: session closed")
)
