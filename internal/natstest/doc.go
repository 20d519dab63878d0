// Package natstest runs real NATS servers for tests: an in-process
// nats-server with JetStream ([RunServer]), an in-process JetStream cluster
// ([RunCluster]), and the real nats-server binary as a child process
// ([StartProcess]) for tests that kill and restart a server. [CheckFor] polls
// a condition instead of sleeping.
//
// It follows the helpers of nats-server's own test suite. Every server
// listens on loopback only and is shut down by t.Cleanup.
//
// Only tests import this package. It may import nats-server/v2, nats.go
// and internal/testkit (its [Buffer] and [CheckFor] are testkit's), and
// nothing else of the project.
package natstest
