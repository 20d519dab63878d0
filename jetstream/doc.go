// Package jetstream is jetembed's NATS plumbing: the connection with its
// reconnect policy and clear first-connect errors ([Connect]), provisioning
// of the streams, the durable pull consumer and the engines KV bucket
// ([Provision]), and an embedded development server ([StartDevServer]).
//
// It is the only package of the project that imports nats.go (imported as
// natsjs for its jetstream package, whose name this package shares) and
// nats-server. It may import schema, but nothing else of the project; the
// consumer and engine packages know nothing of NATS.
package jetstream
