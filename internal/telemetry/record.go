package telemetry

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/jetembed/jetembed/schema"
)

// codeNone is the code label of outcomes without an error, so dashboards can
// select it; an empty label value would read as a missing label.
const codeNone = "none"

// Label keys of jetembed metrics.
const (
	labelOutcome = attribute.Key("outcome")
	labelCode    = attribute.Key("code")
	labelReason  = attribute.Key("reason")
	labelSession = attribute.Key("session")
	labelOp      = attribute.Key("op")
)

func codeLabel(c schema.Code) attribute.KeyValue {
	if c == "" {
		return labelCode.String(codeNone)
	}
	return labelCode.String(string(c))
}

// labelSets caches the measurement option of each label combination: the
// label values come from small closed sets (outcomes, codes, reasons,
// sessions), and building an attribute set per call is most of the cost of
// recording.
type labelSets struct{ m sync.Map }

type labelKey struct {
	key         attribute.Key
	a, b        string
	withOutcome bool
}

func (l *labelSets) get(k labelKey) metric.MeasurementOption {
	if o, ok := l.m.Load(k); ok {
		return o.(metric.MeasurementOption)
	}
	var set attribute.Set
	if k.withOutcome {
		set = attribute.NewSet(labelOutcome.String(k.a), codeLabel(schema.Code(k.b)))
	} else {
		set = attribute.NewSet(k.key.String(k.a))
	}
	o, _ := l.m.LoadOrStore(k, metric.WithAttributeSet(set))
	return o.(metric.MeasurementOption)
}

func (l *labelSets) outcome(o schema.Outcome, c schema.Code) metric.MeasurementOption {
	return l.get(labelKey{a: string(o), b: string(c), withOutcome: true})
}

func (l *labelSets) one(key attribute.Key, v string) metric.MeasurementOption {
	return l.get(labelKey{key: key, a: v})
}

// JobDone counts one job at its disposition for this delivery. code is the
// job-level error code, empty for OutcomeOK.
func (m *Metrics) JobDone(ctx context.Context, outcome schema.Outcome, code schema.Code) {
	if m == nil {
		return
	}
	m.jobs.Add(ctx, 1, m.labels.outcome(outcome, code))
}

// TextsDone counts n texts with the same outcome and code: a job's good items
// in one call, each failed code in another.
func (m *Metrics) TextsDone(ctx context.Context, outcome schema.Outcome, code schema.Code, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.texts.Add(ctx, int64(n), m.labels.outcome(outcome, code))
}

// Tokens counts the real and the padded tokens of a session run; their ratio
// is the packing efficiency.
func (m *Metrics) Tokens(ctx context.Context, tokens, padded int) {
	if m == nil {
		return
	}
	m.tokens.Add(ctx, int64(tokens))
	m.padded.Add(ctx, int64(padded))
}

// BatchTexts records the number of texts of one job's Embed call (the
// engine's queue packs them with every other call's).
func (m *Metrics) BatchTexts(ctx context.Context, n int) {
	if m == nil {
		return
	}
	m.batchTexts.Record(ctx, int64(n))
}

// Chunk records the size of one session run, batch rows times padded length.
func (m *Metrics) Chunk(ctx context.Context, batch, seq int) {
	if m == nil {
		return
	}
	m.chunkTokens.Record(ctx, int64(batch)*int64(seq))
}

// QueueWait records how long a job sat in the stream before it was fetched.
func (m *Metrics) QueueWait(ctx context.Context, d time.Duration) {
	if m == nil {
		return
	}
	m.queueWait.Record(ctx, d.Seconds())
}

// Tokenize records the tokenization time of one gathered batch.
func (m *Metrics) Tokenize(ctx context.Context, d time.Duration) {
	if m == nil {
		return
	}
	m.tokenize.Record(ctx, d.Seconds())
}

// Run records one session run and adds it to that session's busy time.
func (m *Metrics) Run(ctx context.Context, session string, d time.Duration) {
	if m == nil {
		return
	}
	m.run.Record(ctx, d.Seconds())
	m.busy.Add(ctx, d.Seconds(), m.labels.one(labelSession, session))
}

// Publish records the time to publish one result until the server confirmed.
func (m *Metrics) Publish(ctx context.Context, d time.Duration) {
	if m == nil {
		return
	}
	m.publish.Record(ctx, d.Seconds())
}

// Nak counts one NAK. reason is an error code (shape_not_warmed, overloaded,
// ...) or a consumer condition such as "publish_failed" or "shutdown".
func (m *Metrics) Nak(ctx context.Context, reason string) {
	if m == nil {
		return
	}
	m.naks.Add(ctx, 1, m.labels.one(labelReason, reason))
}

// Term counts one terminated message, by reason as for [Metrics.Nak].
func (m *Metrics) Term(ctx context.Context, reason string) {
	if m == nil {
		return
	}
	m.terms.Add(ctx, 1, m.labels.one(labelReason, reason))
}

// RequestsDropped counts n requests of the service that got no answer,
// by reason (see jetstream.ServiceMetrics).
func (m *Metrics) RequestsDropped(ctx context.Context, reason string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.dropped.Add(ctx, int64(n), m.labels.one(labelReason, reason))
}

// RequestsShed counts n requests of the service answered at the door, by
// reason.
func (m *Metrics) RequestsShed(ctx context.Context, reason string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.shed.Add(ctx, int64(n), m.labels.one(labelReason, reason))
}

// GuardRefusal counts one chunk the JIT guard refused before session run.
func (m *Metrics) GuardRefusal(ctx context.Context) {
	if m == nil {
		return
	}
	m.refused.Add(ctx, 1)
}

// SetWarmedShapes sets the number of engine shapes this process has warmed.
func (m *Metrics) SetWarmedShapes(ctx context.Context, n int) {
	if m == nil {
		return
	}
	m.warmed.Record(ctx, int64(n))
}

// SetBreakerOpen records the circuit-breaker state of a session.
func (m *Metrics) SetBreakerOpen(ctx context.Context, session string, open bool) {
	if m == nil {
		return
	}
	var v int64
	if open {
		v = 1
	}
	m.breaker.Record(ctx, v, m.labels.one(labelSession, session))
}

// CacheHits counts n texts answered from the result cache.
func (m *Metrics) CacheHits(ctx context.Context, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.cacheHits.Add(ctx, int64(n))
}

// CacheMisses counts n texts the result cache did not answer, by reason.
func (m *Metrics) CacheMisses(ctx context.Context, reason string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.cacheMiss.Add(ctx, int64(n), m.labels.one(labelReason, reason))
}

// CacheBytes counts n bytes read from or written to the result cache (op
// read or write).
func (m *Metrics) CacheBytes(ctx context.Context, op string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.cacheBytes.Add(ctx, int64(n), m.labels.one(labelOp, op))
}

// CacheErrors counts n failed calls to the result cache, by op (get, put).
func (m *Metrics) CacheErrors(ctx context.Context, op string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.cacheErr.Add(ctx, int64(n), m.labels.one(labelOp, op))
}
