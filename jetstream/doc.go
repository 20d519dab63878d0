// Package jetstream is jetembed's NATS plumbing: the connection with its
// reconnect policy and clear first-connect errors ([Connect]), provisioning
// of the streams, the durable pull consumer and the engines KV bucket
// ([Provision], which alone changes them; [ModeCreate] and [ModeCheck] are
// what serve may do), an embedded development server ([StartDevServer]), and the
// NATS side of the job loop: the fetch loop feeding the consumer ([Pull]),
// the result and dead-letter [Publisher], the request-reply micro service
// ([StartService]), the [Worker] that runs them together with the server's
// consumer settings ([StartWorker]) and the producer [Client]. The [Fleet] ([StartFleet])
// shares compiled engine shapes, compile locks, wanted shapes and probe
// coefficients through the engines bucket ([ReadFleet] shows it); it drives
// the engine through the small [FleetEngine] interface.
//
// It is the only package of the project that imports nats.go (imported as
// natsjs for its jetstream package, whose name this package shares) and
// nats-server. It may import consumer (whose Sink, Delivery and Publisher it
// adapts to), telemetry (trace context in headers) and schema; never engine.
package jetstream
