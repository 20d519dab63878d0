// Package client is the producer side of jetembed for Go programs: it
// queues jobs in the jobs stream ([Client.Submit]), reads their results back
// from the results stream ([Client.Results]), asks for vectors now through
// the request-reply service ([Client.Embed], [Client.Request]), fetches
// results too large for one message from the blobs Object Store bucket
// (sealed: the key travels in the reply), transparently, and asks who
// serves ([Client.PingService], [Client.ServiceMembers]).
//
// In a shared deployment a producer is a tenant ([WithTenant]): the user
// the server authenticates, whose permissions allow its subjects only
// (embed.jobs.<tenant>.>, embed.results.<tenant>.>, embed.v1.embed.<tenant>
// and the inbox prefix _INBOX_<tenant>, set on the connection):
//
//	nc, _ := nats.Connect(url, nats.UserInfo("producer-a", pw),
//		nats.CustomInboxPrefix("_INBOX_producer-a"))
//	c, _ := client.New(nc, client.WithTenant("producer-a"), client.WithRun("nightly"))
//
// client depends only on nats.go, package schema (the wire contract) and
// the OpenTelemetry propagation API (W3C trace context of the ctx travels in
// the message headers). It imports nothing of the server side, so a
// producer's module pulls in no nats-server, no ONNX Runtime and no
// telemetry exporters; a test holds it to that.
//
// Errors: a job-level failure is a *[schema.Error] with a stable
// [schema.Code] (errors.Is matches by code); the client's own failures wrap
// [ErrNoService], [ErrBadResult] or [ErrBlob].
package client
