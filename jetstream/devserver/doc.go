// Package devserver is the embedded nats-server of `jetembed dev` and of the
// bench: JetStream on a local file store, loopback by default, with a max
// payload large enough for ColBERT results. It is for development and
// tests; production runs a real NATS cluster.
//
// It imports nats-server and nothing of the project (internal/importrules
// holds it to that; internal/natstest is the other nats-server importer).
package devserver
