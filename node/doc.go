// Package node is one jetembed serving process (one node of the fleet) as a handle, in the
// manner of River's Client: built from value configs ([Config]), started
// with [Node.Start], stopped with [Node.Stop], ended when
// [Node.Done] is closed. `jetembed serve` and `jetembed dev` parse their
// flags into a [Config] and call [Run]; a Go program can do the same.
//
// A Node owns the NATS connection and connects again when the server
// closes it for good; it checks (or creates) the server's objects at start,
// opens the engine once (it outlives the connections), and on each
// connection runs the fleet membership, the [jetstream.Worker] (fetch
// loop, job loop, request-reply service) and, when asked, the HTTP API in
// front of that worker. One consumer-info sampler, the worker's, feeds the
// prefetch bound, the backlog gauges and heartbeat, and the fleet's busy
// signal. The health server (/healthz, /readyz, /metrics) runs for the
// whole life of the process.
//
// It also holds the NATS side of two other commands: the engines bucket
// record of `jetembed warmup --nats` ([DialRecorder]) and the fleet the
// HTTP gateway calls through the producer client ([GatewayFleet]).
//
// It sits above the layers it wires: it may import jetstream, consumer,
// engine, fleet, gateway, client, schema and internal/telemetry, and
// nats.go for the connection handles it owns (internal/importrules holds
// it to that); it imports no ONNX Runtime binding (the caller's
// [Config.Open] opens the engine) and no OpenTelemetry SDK.
package node
