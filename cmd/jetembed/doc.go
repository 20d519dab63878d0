// Command jetembed turns a NATS JetStream work queue into BGE-M3 embeddings.
//
// Each subcommand lives in its own file (cmd_<name>.go) and registers itself
// with [register] from an init function. All wiring of packages happens here,
// in cmd/: the packages below know nothing of flags or environment variables.
//
// cmd is the top of the one-way flow and may import any package of the
// project. It reaches NATS through package jetstream; the serve, fleet and
// submit --watch wiring still hold nats.go handles (natsjs.JetStream,
// *nats.Conn) that jetstream hands out, the one exception to "only
// jetstream and client import nats.go" (internal/importrules).
package main
