package telemetry

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/metric"
)

// Bucket boundaries. Latencies span a sub-millisecond tokenize call to a job
// that waited minutes in the queue behind a backlog; sizes are powers of two
// because the packer's tiers are.
var (
	secondsBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	textsBuckets   = powersOfTwo(0, 12) // 1 .. 4096 texts
	tokensBuckets  = powersOfTwo(4, 18) // 16 .. 262144 padded tokens
)

func powersOfTwo(from, to int) []float64 {
	b := make([]float64, 0, to-from+1)
	for i := from; i <= to; i++ {
		b = append(b, float64(uint64(1)<<i))
	}
	return b
}

// MetricNames are the names [Metrics] records, as /metrics exposes them
// (Prometheus family names; histograms add _bucket, _sum and _count).
// Dashboards and alerts may rely on exactly these.
var MetricNames = []string{
	"jetembed_jobs_total",
	"jetembed_texts_total",
	"jetembed_tokens_total",
	"jetembed_padded_tokens_total",
	"jetembed_batch_texts",
	"jetembed_chunk_tokens",
	"jetembed_queue_wait_seconds",
	"jetembed_tokenize_seconds",
	"jetembed_run_seconds",
	"jetembed_publish_seconds",
	"jetembed_consumer_pending",
	"jetembed_consumer_ack_pending",
	"jetembed_naks_total",
	"jetembed_terms_total",
	"jetembed_guard_refusals_total",
	"jetembed_warmed_shapes",
	"jetembed_session_busy_seconds_total",
	"jetembed_breaker_open",
	"jetembed_requests_dropped_total",
	"jetembed_requests_shed_total",
	"jetembed_tenant_jobs_total",
	"jetembed_tenant_texts_total",
	"jetembed_tenant_tokens_total",
	"jetembed_tenant_padded_tokens_total",
	"jetembed_tenant_compute_seconds_total",
	"jetembed_tenant_cached_texts_total",
	"jetembed_tenant_cached_tokens_total",
	"jetembed_usage_unrecorded_total",
	"jetembed_cache_hits_total",
	"jetembed_cache_misses_total",
	"jetembed_cache_bytes_total",
	"jetembed_cache_errors_total",
}

// Metrics records what the consumer does, as the OpenTelemetry
// instruments named jetembed_*, on the meter provider it was made with
// (package export makes one that /metrics serves in the Prometheus format).
// Its methods are safe for concurrent use, and a nil *Metrics records
// nothing, so code under test may leave it out.
type Metrics struct {
	meter  metric.Meter
	labels labelSets

	jobs, texts          metric.Int64Counter
	tokens, padded       metric.Int64Counter
	naks, terms, refused metric.Int64Counter
	dropped, shed        metric.Int64Counter
	cacheHits, cacheMiss metric.Int64Counter
	cacheBytes, cacheErr metric.Int64Counter
	batchTexts           metric.Int64Histogram
	chunkTokens          metric.Int64Histogram
	queueWait, tokenize  metric.Float64Histogram
	run, publish         metric.Float64Histogram
	busy                 metric.Float64Counter
	warmed, breaker      metric.Int64Gauge
	pending, ackPending  metric.Int64ObservableGauge
	usage                usageInstruments
}

// NewMetrics creates the instruments on a meter of mp. Library packages
// see only this API; the SDK and its exporters are package export's.
func NewMetrics(mp metric.MeterProvider) (*Metrics, error) {
	m := &Metrics{meter: mp.Meter(InstrumentationName)}
	if err := m.instruments(m.meter); err != nil {
		return nil, err
	}
	return m, nil
}

// instruments creates every instrument, keeping the first error: the meter
// API returns a usable no-op instrument beside each error, so the others
// need no check of their own.
func (m *Metrics) instruments(meter metric.Meter) error {
	var first error
	keep := func(err error) {
		if first == nil && err != nil {
			first = fmt.Errorf("telemetry: instrument: %w", err)
		}
	}
	counter := func(name, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithDescription(desc))
		keep(err)
		return c
	}
	seconds := func(name, desc string) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(secondsBuckets...))
		keep(err)
		return h
	}
	sizes := func(name, desc string, buckets []float64) metric.Int64Histogram {
		h, err := meter.Int64Histogram(name, metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(buckets...))
		keep(err)
		return h
	}
	gauge := func(name, desc string) metric.Int64Gauge {
		g, err := meter.Int64Gauge(name, metric.WithDescription(desc))
		keep(err)
		return g
	}
	observable := func(name, desc string) metric.Int64ObservableGauge {
		g, err := meter.Int64ObservableGauge(name, metric.WithDescription(desc))
		keep(err)
		return g
	}

	m.jobs = counter("jetembed_jobs_total", "Jobs finished, by outcome (ok, error, nak, term) and error code.")
	m.texts = counter("jetembed_texts_total", "Texts finished, by outcome and error code.")
	m.tokens = counter("jetembed_tokens_total", "Real (unpadded) tokens run through the model.")
	m.padded = counter("jetembed_padded_tokens_total", "Tokens run through the model including padding.")
	m.naks = counter("jetembed_naks_total", "Messages NAKed, by reason.")
	m.terms = counter("jetembed_terms_total", "Messages terminated, by reason.")
	m.refused = counter("jetembed_guard_refusals_total", "Chunks refused by the JIT guard before session run.")
	m.dropped = counter("jetembed_requests_dropped_total", "Requests of the service that got no answer, by reason (slow_consumer, no_reply, refused_reply, answer_failed).")
	m.shed = counter("jetembed_requests_shed_total", "Requests of the service answered at once without reaching their endpoint, by reason (queue_full, stopping).")
	m.cacheHits = counter("jetembed_cache_hits_total", "Texts answered from the fleet's result cache (serve --cache kv) instead of a model run.")
	m.cacheMiss = counter("jetembed_cache_misses_total", "Texts the result cache did not answer, by reason (absent, corrupt, foreign, oversized, unavailable).")
	m.cacheBytes = counter("jetembed_cache_bytes_total", "Bytes read from (op=read) and written to (op=write) the result cache.")
	m.cacheErr = counter("jetembed_cache_errors_total", "Failed calls to the result cache, by op (get, put): its texts were computed.")
	m.batchTexts = sizes("jetembed_batch_texts", "Texts per Embed call (one job).", textsBuckets)
	m.chunkTokens = sizes("jetembed_chunk_tokens", "Padded tokens (batch x seq) per session run.", tokensBuckets)
	m.queueWait = seconds("jetembed_queue_wait_seconds", "Time from publish of a job to its fetch.")
	m.tokenize = seconds("jetembed_tokenize_seconds", "Tokenization time per Embed call.")
	m.run = seconds("jetembed_run_seconds", "Session run time per chunk.")
	m.publish = seconds("jetembed_publish_seconds", "Result publish time until confirmed, per job.")
	busy, err := meter.Float64Counter("jetembed_session_busy_seconds_total",
		metric.WithDescription("Time each session spent running chunks."), metric.WithUnit("s"))
	keep(err)
	m.busy = busy
	m.usage.create(counter, func(name, desc string) metric.Float64Counter {
		c, err := meter.Float64Counter(name, metric.WithDescription(desc), metric.WithUnit("s"))
		keep(err)
		return c
	})
	m.warmed = gauge("jetembed_warmed_shapes", "Engine shapes warmed in this process.")
	m.breaker = gauge("jetembed_breaker_open", "1 while the session's circuit breaker is open.")
	m.pending = observable("jetembed_consumer_pending", "Messages in the stream not yet delivered to the consumer.")
	m.ackPending = observable("jetembed_consumer_ack_pending", "Messages delivered and not yet acknowledged.")
	return first
}

// ConsumerStats is what the JetStream consumer info says about the backlog.
type ConsumerStats struct {
	// Pending counts stream messages not yet delivered (NumPending).
	Pending uint64
	// AckPending counts messages delivered and not yet acknowledged.
	AckPending int
}

// ObserveConsumer makes fn the source of jetembed_consumer_pending and
// jetembed_consumer_ack_pending. fn runs on every scrape, so it should be
// cheap (e.g. return the latest cached consumer info); when it fails, the
// gauges are left out of that scrape rather than reported as zero. Call the
// returned unregister to stop observing.
func (m *Metrics) ObserveConsumer(fn func(context.Context) (ConsumerStats, error)) (unregister func() error, err error) {
	if m == nil {
		return func() error { return nil }, nil
	}
	reg, err := m.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		s, err := fn(ctx)
		if err != nil {
			return nil
		}
		o.ObserveInt64(m.pending, int64(min(s.Pending, uint64(1<<63-1))))
		o.ObserveInt64(m.ackPending, int64(s.AckPending))
		return nil
	}, m.pending, m.ackPending)
	if err != nil {
		return nil, fmt.Errorf("telemetry: observe consumer: %w", err)
	}
	return reg.Unregister, nil
}
