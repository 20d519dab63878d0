// Package fleet is the fleet-at-scale benchmark (`make bench-fleet`): a
// three-node JetStream cluster of real nats-server processes, R3 streams on
// file storage, and N members in this process, each a real
// [jetstream.StartWorker] stack (consumer, pull loop, publisher, request
// service) and a fleet member (package fleet's Join) over its own connection, on an engine
// whose sessions sleep by a GPU cost model instead of running a model. What
// the CPU spends is therefore NATS and jetembed, measured apart: the test
// process's own CPU time against each server process's.
//
// It pushes a bulk backlog, churns members while it drains (added, killed by
// closing the connection without a drain, stopped gracefully), then has one
// member compile a shape and every member want another at once. It checks
// from the results stream that every job has exactly one stored result, and
// prints the figures as Markdown (BENCHMARKS.md keeps a run).
//
// The package has no code outside its tests. Run without flags (as `make
// test` does) it is a smoke run of 4 members and 500 jobs; `make
// bench-fleet` passes -fleet.full for the measured run. It may import any
// package of the project, nats.go and internal/natstest.
package fleet
