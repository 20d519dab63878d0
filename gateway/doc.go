// Package gateway is jetembed's HTTP front door: a stateless server that
// turns each HTTP call into request-reply calls on the fleet's embed
// service (embed.v1.embed, embed.v1.rerank, embed.v1.tokenize) and answers
// in the shapes HTTP embedding clients expect — the OpenAI embeddings API
// (POST /v1/embeddings, GET /v1/models), the routes of Hugging Face TEI
// (POST /embed, /embed_sparse, /embed_all, /rerank, /tokenize, GET /info),
// the Cohere/Jina POST /v1/rerank, the sparse and dense+sparse endpoints
// of BGE-M3 servers (POST /v1/sparse-embeddings, POST /v1/embeddings:both),
// and health checks (GET /health, GET /health/deep).
//
// It keeps no state a restart would lose: any number of gateways may run
// in front of one fleet. A call is cut into fleet jobs no larger than one
// member's published interactive capacity, admitted or refused as one
// unit against a window of the whole fleet's (admission.go, capacity.go),
// and reassembled in order. The server guards itself: connections capped
// below the file limit (conns.go), bodies read whole, within a deadline
// sized to them and a byte budget, before a concurrency slot is taken
// (body.go), strict JSON (strictjson.go), modern TLS only (tls.go), and
// calls failed fast while the connection to the fleet is down (link.go).
//
// The fleet is reached through the small [Requester] and [Pinger]
// interfaces (with the optional [Reranker], [Tokenizer] and
// [MemberLister]), so this package imports neither nats.go nor the
// engine: only schema (the wire types and error codes), internal/drain
// (the drain-rate meter of its admission window) and the Prometheus
// client.
package gateway
