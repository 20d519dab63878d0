// Package faults proves, with real processes and real NATS servers, that
// jetembed loses no job under faults: a consumer killed with SIGKILL in the
// middle of a bulk run, a nats-server restarted under load, the stream leader
// of a three-node cluster killed, work slower than AckWait, and a flood of
// poison jobs among good ones.
//
// The package has no code outside its tests. The tests build the jetembed
// binary once per test binary and run `jetembed serve` as a child process
// against the committed tiny model, so a kill is a real kill; they may import
// any package of the project and nats.go, nats-server and internal/natstest.
// Everything listens on loopback. Each test asserts exactly one result per job
// in the results stream (deduplicated by Nats-Msg-Id) and that nothing is
// left in the work queue, and logs delivery counts and timings.
package faults
