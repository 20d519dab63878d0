package export

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/jetembed/jetembed/internal/telemetry"
)

// Prometheus is jetembed's metrics on the OpenTelemetry SDK, exported to a
// private Prometheus registry (with the Go runtime and process
// collectors), so that two instances, as in tests, do not collide on the
// global one. Pass its Metrics to the packages that record; serve Handler
// on /metrics.
type Prometheus struct {
	*telemetry.Metrics
	provider *sdkmetric.MeterProvider
	registry *prometheus.Registry
}

// NewPrometheus creates the meter provider, the exporter and the
// instruments.
func NewPrometheus() (*Prometheus, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Instruments carry their final Prometheus names (with _total and
	// _seconds already), so the exporter must not append suffixes again.
	exp, err := otelprom.New(
		otelprom.WithRegisterer(reg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithoutSuffixes),
		otelprom.WithoutScopeInfo(),
		otelprom.WithoutTargetInfo(),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	p := &Prometheus{provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)), registry: reg}
	if p.Metrics, err = telemetry.NewMetrics(p.provider); err != nil {
		return nil, errors.Join(err, p.provider.Shutdown(context.Background()))
	}
	return p, nil
}

// Handler serves the metrics in the Prometheus text format, for /metrics.
func (p *Prometheus) Handler() http.Handler {
	return promhttp.HandlerFor(p.registry, promhttp.HandlerOpts{Registry: p.registry})
}

// MeterProvider is the SDK's meter provider the exporter reads, for a
// program that makes its own instruments on it (the runtime's).
func (p *Prometheus) MeterProvider() metric.MeterProvider { return p.provider }

// Shutdown stops the meter provider; recording after it is a no-op.
func (p *Prometheus) Shutdown(ctx context.Context) error { return p.provider.Shutdown(ctx) }

// Registerer is the private registry /metrics serves, for the collectors of
// other packages (the HTTP gateway's).
func (p *Prometheus) Registerer() prometheus.Registerer { return p.registry }
