// Package jetstream is jetembed's NATS adapter. It holds the connection
// with its reconnect policy and clear first-connect errors ([Connect],
// [Reconnect]); provisioning of the streams, the durable pull consumer and
// the buckets ([Provision], which alone changes them; [ModeCreate] and
// [ModeCheck] are what a serving process may do); and the NATS side of the
// job loop (package consumer): the fetch loop that feeds a [Sink] ([Pull]),
// the result and dead-letter [Publisher], the request-reply micro service
// ([StartService]), and the [Worker] that runs them on one connection with
// the server's consumer settings ([StartWorker]). [KVStore] is the engines
// bucket as package fleet's Store (the fleet's logic lives there), and
// [DeadLetters] and [RunWatch] serve `jetembed dlq` and `jetembed submit`.
// The producer SDK is package client; the process that owns a connection
// and its reconnects is package node.
//
// With client and node it is one of the packages that import nats.go
// (imported as natsjs for its jetstream package, whose name this package
// shares); it imports no nats-server (the embedded development server is
// jetstream/devserver's). It may import consumer (whose Delivery, Message,
// Publisher and BlobStore it adapts nats.go to), engine (for the Embedder
// a Worker takes, never the sessions), fleet (whose Store it implements),
// client (the service member a Worker reports, and its names),
// internal/telemetry (trace context in headers) and schema.
// internal/importrules holds it to that.
package jetstream
