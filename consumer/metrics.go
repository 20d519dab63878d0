package consumer

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/jetembed/jetembed/internal/telemetry"
	"github.com/jetembed/jetembed/schema"
)

// Metrics is what the loop records. [NewMetrics] makes jetembed's own; tests
// count calls with a fake.
type Metrics interface {
	// JobDone counts a job at its disposition for this delivery, with its
	// job-level code (empty on success).
	JobDone(ctx context.Context, outcome schema.Outcome, code schema.Code)
	// TextsDone counts n texts of one job with the same outcome and code.
	TextsDone(ctx context.Context, outcome schema.Outcome, code schema.Code, n int)
	// Tokens counts the real and padded tokens of one run.
	Tokens(ctx context.Context, tokens, padded int)
	// Chunk records the shape of one run.
	Chunk(ctx context.Context, batch, seq int)
	// BatchTexts records the texts of one job's Embed call.
	BatchTexts(ctx context.Context, n int)
	// QueueWait records how long a job waited from its arrival (its
	// stream timestamp) until its Embed call started.
	QueueWait(ctx context.Context, d time.Duration)
	// Publish records one confirmed result publish.
	Publish(ctx context.Context, d time.Duration)
	// Nak and Term count settlements by reason: an error code or one of
	// the Reason* conditions.
	Nak(ctx context.Context, reason string)
	Term(ctx context.Context, reason string)
}

// Reasons of NAKs and TERMs that are not error codes.
const (
	ReasonPublishFailed = "publish_failed"
	// ReasonPublishDenied: the server refused the result's publish (the
	// consumer's user may not publish to the reply subject).
	ReasonPublishDenied = "publish_denied"
	ReasonDLQFailed     = "dlq_failed"
	ReasonShutdown      = "shutdown"
)

type nopMetrics struct{}

func (nopMetrics) JobDone(context.Context, schema.Outcome, schema.Code)        {}
func (nopMetrics) TextsDone(context.Context, schema.Outcome, schema.Code, int) {}
func (nopMetrics) Tokens(context.Context, int, int)                            {}
func (nopMetrics) Chunk(context.Context, int, int)                             {}
func (nopMetrics) BatchTexts(context.Context, int)                             {}
func (nopMetrics) QueueWait(context.Context, time.Duration)                    {}
func (nopMetrics) Run(context.Context, string, time.Duration)                  {}
func (nopMetrics) Publish(context.Context, time.Duration)                      {}
func (nopMetrics) Nak(context.Context, string)                                 {}
func (nopMetrics) Term(context.Context, string)                                {}

var (
	_ Metrics      = (*telemetry.Metrics)(nil)
	_ CacheMetrics = (*telemetry.Metrics)(nil)
)

// NewMetrics creates jetembed's instruments (the jetembed_* families serve
// exposes on /metrics) on a meter of mp, for a program that runs the loop
// with its own OpenTelemetry SDK: set the result as [Config.Metrics]. It
// records the engine's facts too (it is an engine.Metrics: pass it to
// Engine.SetMetrics). This package uses the OpenTelemetry API only.
func NewMetrics(mp metric.MeterProvider) (Metrics, error) {
	m, err := telemetry.NewMetrics(mp)
	if err != nil {
		return nil, err
	}
	return m, nil
}
