// Package bench is the benchmark harness behind `jetembed bench` and
// `make bench`: it measures, in one run on one machine, how close the whole
// NATS pipeline comes to the bare engine, what the loop costs around a no-op
// engine, what bin-packing gains over arrival-order batching, the added
// latency of request-reply (idle and under load), tenant B's latency under
// tenant A's backlog and the split of weighted tenants, a naive
// one-run-per-message baseline, the transformers.js peer on the same model
// files and texts, the peak RSS of the bulk run against the in-flight
// budget, and the result cache (serve --cache kv): a re-index of the corpus
// under new job ids against the first run, and a run with repeated texts.
//
// Every figure is a ratio of two measurements taken in the same run, so that
// the machine cancels out; [Report.Markdown] prints them with the raw rates.
//
// bench sits beside cmd/ at the top of the one-way flow (it is internal:
// only cmd/jetembed runs it): it may import jetstream, consumer, engine and
// its subpackages, and schema, and it starts an embedded nats-server
// through jetstream/devserver (or, with $JETEMBED_BENCH_SERVER_PROCESS set
// to a nats-server binary, that server as a process of its own). It never imports nats.go itself: the
// connection and JetStream handles come from package jetstream.
package bench
