package export

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/jetembed/jetembed/internal/telemetry"
	"github.com/jetembed/jetembed/schema"
)

// scrape fetches /metrics through h and parses the text exposition.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: status %d: %s", rec.Code, rec.Body)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(rec.Body.String()))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, rec.Body)
	}
	return fams
}

// sample finds the sample of family name whose labels are exactly labels.
func sample(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		names := make([]string, 0, len(fams))
		for n := range fams {
			if strings.HasPrefix(n, "jetembed_") {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		t.Fatalf("metric %s not exposed; jetembed metrics: %v", name, names)
	}
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) != len(labels) {
			continue
		}
		match := true
		for _, l := range m.GetLabel() {
			if labels[l.GetName()] != l.GetValue() {
				match = false
			}
		}
		if match {
			return m
		}
	}
	t.Fatalf("metric %s has no sample with labels %v; has %v", name, labels, f.GetMetric())
	return nil
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return -1
}

func TestMetricsScrape(t *testing.T) {
	ctx := context.Background()
	m, err := NewPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(ctx)

	m.JobDone(ctx, schema.OutcomeOK, "")
	m.JobDone(ctx, schema.OutcomeOK, "")
	m.JobDone(ctx, schema.OutcomeTerm, schema.CodeBadPayload)
	m.TextsDone(ctx, schema.OutcomeOK, "", 7)
	m.TextsDone(ctx, schema.OutcomeError, schema.CodeTextTooLong, 2)
	m.TextsDone(ctx, schema.OutcomeError, schema.CodeTextTooLong, 0) // no-op
	m.Tokens(ctx, 100, 128)
	m.Tokens(ctx, 20, 32)
	m.BatchTexts(ctx, 9)
	m.Chunk(ctx, 4, 32)
	m.Chunk(ctx, 1, 512)
	m.QueueWait(ctx, 2*time.Second)
	m.Tokenize(ctx, 3*time.Millisecond)
	m.Run(ctx, "gpu0", 250*time.Millisecond)
	m.Run(ctx, "gpu0", 250*time.Millisecond)
	m.Run(ctx, "gpu1", time.Second)
	m.Publish(ctx, 4*time.Millisecond)
	m.Nak(ctx, string(schema.CodeShapeNotWarmed))
	m.Nak(ctx, string(schema.CodeShapeNotWarmed))
	m.Nak(ctx, "publish_failed")
	m.Term(ctx, "max_deliver")
	m.GuardRefusal(ctx)
	m.GuardRefusal(ctx)
	m.GuardRefusal(ctx)
	m.SetWarmedShapes(ctx, 12)
	m.SetBreakerOpen(ctx, "gpu0", true)
	m.SetBreakerOpen(ctx, "gpu1", true)
	m.SetBreakerOpen(ctx, "gpu1", false)
	unregister, err := m.ObserveConsumer(func(context.Context) (telemetry.ConsumerStats, error) {
		return telemetry.ConsumerStats{Pending: 4242, AckPending: 17}, nil
	})
	if err != nil {
		t.Fatal(err)
	}

	fams := scrape(t, m.Handler())
	counters := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"jetembed_jobs_total", map[string]string{"outcome": "ok", "code": "none"}, 2},
		{"jetembed_jobs_total", map[string]string{"outcome": "term", "code": "bad_payload"}, 1},
		{"jetembed_texts_total", map[string]string{"outcome": "ok", "code": "none"}, 7},
		{"jetembed_texts_total", map[string]string{"outcome": "error", "code": "text_too_long"}, 2},
		{"jetembed_tokens_total", nil, 120},
		{"jetembed_padded_tokens_total", nil, 160},
		{"jetembed_naks_total", map[string]string{"reason": "shape_not_warmed"}, 2},
		{"jetembed_naks_total", map[string]string{"reason": "publish_failed"}, 1},
		{"jetembed_terms_total", map[string]string{"reason": "max_deliver"}, 1},
		{"jetembed_guard_refusals_total", nil, 3},
		{"jetembed_session_busy_seconds_total", map[string]string{"session": "gpu0"}, 0.5},
		{"jetembed_session_busy_seconds_total", map[string]string{"session": "gpu1"}, 1},
		{"jetembed_warmed_shapes", nil, 12},
		{"jetembed_breaker_open", map[string]string{"session": "gpu0"}, 1},
		{"jetembed_breaker_open", map[string]string{"session": "gpu1"}, 0},
		{"jetembed_consumer_pending", nil, 4242},
		{"jetembed_consumer_ack_pending", nil, 17},
	}
	for _, c := range counters {
		if got := value(sample(t, fams, c.name, c.labels)); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}

	hists := []struct {
		name       string
		count      uint64
		sum        float64
		le         float64 // a bucket bound ...
		cumulative uint64  // ... and the count at or below it
	}{
		{"jetembed_batch_texts", 1, 9, 16, 1},
		{"jetembed_chunk_tokens", 2, 640, 128, 1},
		{"jetembed_queue_wait_seconds", 1, 2, 1, 0},
		{"jetembed_tokenize_seconds", 1, 0.003, 0.005, 1},
		{"jetembed_run_seconds", 3, 1.5, 0.25, 2},
		{"jetembed_publish_seconds", 1, 0.004, 0.0025, 0},
	}
	for _, c := range hists {
		h := sample(t, fams, c.name, nil).GetHistogram()
		if h == nil {
			t.Errorf("%s is not a histogram", c.name)
			continue
		}
		if h.GetSampleCount() != c.count || !near(h.GetSampleSum(), c.sum) {
			t.Errorf("%s: count %d sum %v, want %d and %v", c.name, h.GetSampleCount(), h.GetSampleSum(), c.count, c.sum)
		}
		found := false
		for _, b := range h.GetBucket() {
			if b.GetUpperBound() == c.le {
				found = true
				if b.GetCumulativeCount() != c.cumulative {
					t.Errorf("%s{le=%v} = %d, want %d", c.name, c.le, b.GetCumulativeCount(), c.cumulative)
				}
			}
		}
		if !found {
			t.Errorf("%s has no bucket le=%v", c.name, c.le)
		}
	}

	// A second scrape sees counters grow by exactly what was added since.
	m.JobDone(ctx, schema.OutcomeOK, "")
	m.Tokens(ctx, 5, 8)
	fams = scrape(t, m.Handler())
	if got := value(sample(t, fams, "jetembed_jobs_total", map[string]string{"outcome": "ok", "code": "none"})); got != 3 {
		t.Errorf("jobs ok after one more = %v, want 3", got)
	}
	if got := value(sample(t, fams, "jetembed_padded_tokens_total", nil)); got != 168 {
		t.Errorf("padded tokens = %v, want 168", got)
	}

	if err := unregister(); err != nil {
		t.Fatal(err)
	}
	if _, ok := scrape(t, m.Handler())["jetembed_consumer_pending"]; ok {
		t.Error("jetembed_consumer_pending still exposed after unregister")
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestObserveConsumerErrorSkipsGauges(t *testing.T) {
	m, err := NewPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	fail := true
	if _, err := m.ObserveConsumer(func(context.Context) (telemetry.ConsumerStats, error) {
		if fail {
			return telemetry.ConsumerStats{}, errors.New("nats: timeout")
		}
		return telemetry.ConsumerStats{Pending: 3}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, ok := scrape(t, m.Handler())["jetembed_consumer_pending"]; ok {
		t.Error("pending exposed although the stats callback failed")
	}
	fail = false
	if got := value(sample(t, scrape(t, m.Handler()), "jetembed_consumer_pending", nil)); got != 3 {
		t.Errorf("pending = %v, want 3", got)
	}
}

// TestNilMetrics checks that code under test can run without metrics.
func TestNilMetrics(t *testing.T) {
	ctx := context.Background()
	var m *telemetry.Metrics
	m.JobDone(ctx, schema.OutcomeOK, "")
	m.TextsDone(ctx, schema.OutcomeOK, "", 1)
	m.Tokens(ctx, 1, 1)
	m.Run(ctx, "s", time.Second)
	m.SetBreakerOpen(ctx, "s", true)
	if _, err := m.ObserveConsumer(nil); err != nil {
		t.Fatal(err)
	}
}

// TestMetricNames pins the exposed names: dashboards, alerts and the KEDA
// and Grafana files in deploy/ depend on them.
func TestMetricNames(t *testing.T) {
	m, err := NewPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer m.Shutdown(ctx)
	m.JobDone(ctx, schema.OutcomeOK, "")
	m.TextsDone(ctx, schema.OutcomeOK, "", 1)
	m.Tokens(ctx, 1, 1)
	m.BatchTexts(ctx, 1)
	m.Chunk(ctx, 1, 1)
	m.QueueWait(ctx, time.Millisecond)
	m.Tokenize(ctx, time.Millisecond)
	m.Run(ctx, "s", time.Millisecond)
	m.Publish(ctx, time.Millisecond)
	m.Nak(ctx, "r")
	m.Term(ctx, "r")
	m.GuardRefusal(ctx)
	m.RequestsDropped(ctx, "r", 1)
	m.RequestsShed(ctx, "r", 1)
	m.CacheHits(ctx, 1)
	m.CacheMisses(ctx, "absent", 1)
	m.CacheBytes(ctx, "read", 1)
	m.CacheErrors(ctx, "get", 1)
	m.SetWarmedShapes(ctx, 1)
	m.SetBreakerOpen(ctx, "s", false)
	m.TenantUsage(ctx, telemetry.Usage{Tenant: "acme", Texts: 1, Tokens: 1, PaddedTokens: 1, Compute: time.Millisecond, CachedTexts: 1, CachedTokens: 1})
	m.UsageUnrecorded(ctx, "lost")
	if _, err := m.ObserveConsumer(func(context.Context) (telemetry.ConsumerStats, error) { return telemetry.ConsumerStats{}, nil }); err != nil {
		t.Fatal(err)
	}
	var got []string
	for name := range scrape(t, m.Handler()) {
		if strings.HasPrefix(name, "jetembed_") {
			got = append(got, name)
		}
	}
	sort.Strings(got)
	want := append([]string(nil), telemetry.MetricNames...)
	sort.Strings(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("exposed metrics:\n%v\nwant:\n%v", got, want)
	}
}
