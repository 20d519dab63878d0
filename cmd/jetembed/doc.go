// Command jetembed turns a NATS JetStream work queue into BGE-M3 embeddings.
//
// Each subcommand lives in its own file (cmd_<name>.go) and registers itself
// with [register] from an init function. Flags and environment variables
// live here, in cmd/, and nowhere below: a command parses them once into
// the value configs of the packages it runs (serve and dev into a
// node.Config, then node.Run), and maps their errors to exit codes.
//
// cmd is the top of the one-way flow and may import any package of the
// project. It imports no nats.go: it hands the connection jetstream.Connect
// returns to client and node without naming its type, and the NATS
// logic of its commands (reconnects, consumer info, the dead-letter
// stream, the engines bucket) is in jetstream and node
// (internal/importrules holds it to that).
package main
