// Package walkcount measures, in its test, how far a reader travels to
// follow one job: a depth-first walk of the static calls from
// (*consumer.Loop).runJob, counting the functions read, the files entered
// and the returns (the times the walk enters a file it had left before).
// docs/architecture.md quotes its counts; run it with
//
//	go test ./internal/walkcount -run TestWalk -v
//
// It loads the packages with `go list -export` and go/types from the
// standard library, so it adds no dependency to the module.
//
// The package has no code outside its test and is imported by nothing.
package walkcount
