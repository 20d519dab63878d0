// Package importrules holds, in its test, the import rules the doc.go of
// every package of jetembed states: which project packages each one may
// import, that schema imports nothing of the project, that the engine
// knows no NATS, that only jetstream and client speak nats.go (the HTTP
// gateway reaches the fleet through an interface), that cgo comes in only
// through engine/ort (ONNX Runtime) and the hftokenizers backend of
// engine/tokenizer, and that client pulls in nothing of the server side.
//
// The rules are read from `go list -deps -json`, so they see the build as
// the go command does (build tags and cgo included). Only non-test code is
// held to them: tests may import what they need to check behaviour.
//
// The package has no code outside its test and is imported by nothing.
package importrules
