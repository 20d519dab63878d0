// Package jetstream is jetembed's NATS plumbing: the connection with its
// reconnect policy and clear first-connect errors ([Connect]), provisioning
// of the streams, the durable pull consumer and the engines KV bucket
// ([Provision], which alone changes them; [ModeCreate] and [ModeCheck] are
// what serve may do), and the NATS side of the job loop: the fetch loop feeding the consumer ([Pull]),
// the result and dead-letter [Publisher], the request-reply micro service
// ([StartService]), the [Worker] that runs them together with the server's
// consumer settings ([StartWorker]) and the producer [Client]. [KVStore]
// is the engines bucket as package fleet's Store: the fleet's logic (shape
// records, the compile lock, pre-warm, wants, membership) lives there, the
// NATS side of it here.
//
// With client it is one of the two library packages that import nats.go
// (imported as natsjs for its jetstream package, whose name this package
// shares); it imports no nats-server (the embedded development server is
// internal/devserver's). internal/importrules holds it to that. It may
// import internal/consumer (whose Sink, Delivery and Publisher it adapts
// to, and whose configuration types it names by alias), fleet
// (whose Store it implements), internal/telemetry (trace context in
// headers, and [NewMetrics]: the job loop's instruments on a meter provider
// the program gives) and schema; never engine.
package jetstream
