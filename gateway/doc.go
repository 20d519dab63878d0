// Package gateway is jetembed's HTTP front door: a stateless server that
// turns each HTTP call into request-reply calls on the fleet's embed
// endpoint (embed.v1.embed) and answers in the shapes HTTP embedding
// clients expect — the OpenAI embeddings API (POST /v1/embeddings,
// GET /v1/models), the sparse and dense+sparse endpoints of BGE-M3 servers
// (POST /v1/sparse-embeddings, POST /v1/embeddings:both), and health
// checks (GET /health, GET /health/deep).
//
// It keeps no state a restart would lose: any number of gateways may run
// in front of one fleet. A call with more inputs than one fleet job holds
// is split into several jobs, sent concurrently and reassembled in order.
//
// The fleet is reached through the small [Requester] and [Pinger]
// interfaces, so this package imports neither nats.go nor the engine: only
// schema (the wire types and error codes) and the Prometheus client.
package gateway
