// Package fleet makes consumer processes a fleet that shares compiled
// engine shapes: it owns the keys and records of the engines bucket (and
// their validation: everything in the bucket came from the network), the
// compile lock, pre-warming peers' shapes, the wanted shapes and the idle
// compile policy, the shared probe coefficients, and membership
// (heartbeats, and the operator's view of the bucket, [Read]).
//
// A process joins with [Join] and wraps its embedder with [Wrap] so that
// the JIT guard's refusals become wants; `jetembed warmup` records what it
// warmed with [Publish]. The fleet talks to the bucket through the small
// [Store] interface (package jetstream's KVStore implements it over
// JetStream KV) and drives the engine through [Engine], which
// *engine.Engine satisfies.
//
// It imports engine and schema; never NATS.
package fleet
