// Package schema is wire contract v1 of jetembed: the [Job] and [Result]
// types, their msgpack and JSON encodings, the header names, the wire
// names of the default deployment (subjects such as [SubjectEmbed] and
// [SubjectJobs], the streams and buckets), the [Limits] and their
// validation, the reply policy, and the stable error [Code]s and
// [Outcome]s. Producers, the job loop, the gateway and clients all speak
// through it.
//
// schema imports nothing of the project (it is the bottom of the one-way
// flow cmd -> node -> jetstream -> consumer -> engine -> schema) and
// nothing of NATS: headers are plain map[string][]string, which
// nats.Header converts to and from.
//
// # Encodings
//
// A body is msgpack unless its Content-Type header is application/json
// ([EncodingFor]); a result uses its job's encoding. Field names are the
// same in both encodings:
//
//	job:    v, id, texts, outputs, truncate, reply, deadline, meta
//	result: v, id, model, items, usage {tokens, padded_tokens},
//	        error {code, message, retriable}, meta,
//	        blob {name, size, digest, key} (a result stored in the blobs
//	        bucket, sealed with key: [SealBlob])
//	item:   dense, sparse {ids, weights}, colbert, tokens, truncated,
//	        error {code, message}
//
// The rerank and tokenize endpoints of the service have their own bodies
// ([RerankRequest], [TokenizeRequest]), decoded by the same strict rules:
//
//	rerank request:   v, id, query, texts, weights {dense, sparse, colbert},
//	                  truncate, deadline
//	rerank result:    v, id, model, scores [{index, score, dense, sparse,
//	                  colbert, tokens, error}], usage, error
//	tokenize request: v, id, texts, add_special
//	tokenize result:  v, id, model, items [{ids, tokens, special, count,
//	                  error}], error
//
// Empty fields are omitted. An absent "v" means 1; any other version is
// refused with bad_version. Absent "outputs" means [dense]; absent
// "truncate" means true. Unknown fields are ignored. Field names match
// exactly, a key given twice is bad_payload, and meta is echoed byte for
// byte ([Result.EchoMeta]).
//
// # Reply subjects
//
// A [ReplyPolicy] decides which reply subjects a result may be published
// to: the space of the job's [Tenancy] (the tenant read from the subject
// the job arrived on, never from its body) and an allow-list; a refused one
// is bad_reply. Results carry [ResultMsgID] (tenant, reply and job id,
// hashed) as their Nats-Msg-Id.
//
// # Vectors in msgpack
//
// A [Vector] (dense, sparse weights, one ColBERT row) is a msgpack bin
// (0xc4/0xc5/0xc6 header) holding little-endian IEEE 754 float32 values,
// 4 bytes each, with no per-value tags; every bit pattern (-0, NaN payloads,
// denormals) travels unchanged. ColBERT is a msgpack array of such bins, one
// per token, all of the same dimension. Sparse ids are a plain msgpack array
// of unsigned integers, sorted ascending, parallel to the weights. In JSON
// vectors are arrays of numbers and ColBERT an array of arrays; JSON cannot
// carry NaN or infinities.
//
// # Decoding untrusted bytes
//
// [DecodeJob] and [DecodeResult] decode msgpack by hand (the reflective
// decoder of vmihailenco/msgpack trusts length headers: a 5-byte map32
// header makes it allocate until the process dies). Every length is checked
// against the bytes left, so allocation stays proportional to the payload;
// opaque values (meta, unknown fields) nest at most 64 deep; any malformed
// input is a bad_payload [*Error], never a panic. [Job] and [Result]
// implement msgpack.CustomDecoder, so msgpack.Unmarshal into them takes the
// same path.
//
// # Validation
//
// [Limits.DecodeJob] is the consumer's admission path: payload size
// (job_too_large), decoding (bad_payload), then [Limits.Validate], which
// returns one job-level error (bad_version, missing_id, empty_job,
// too_many_texts, job_too_large, unknown_output, bad_payload) or per-text
// errors (invalid_utf8) that fail only their item.
package schema
