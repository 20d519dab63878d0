package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetembed/jetembed/schema"
)

// MetricNames are the Prometheus families the gateway exposes (histograms
// add _bucket, _sum and _count).
var MetricNames = []string{
	"jetembed_gateway_requests_total",
	"jetembed_gateway_request_seconds",
	"jetembed_gateway_inputs_total",
	"jetembed_gateway_fleet_calls_total",
	"jetembed_gateway_in_flight",
	"jetembed_gateway_connections_refused_total",
}

// metrics records what the gateway does; a nil *metrics records nothing.
type metrics struct {
	requests   *prometheus.CounterVec
	seconds    *prometheus.HistogramVec
	inputCount prometheus.Counter
	fleet      *prometheus.CounterVec
	inFlight   prometheus.Gauge
	refused    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetembed_gateway_requests_total",
			Help: "HTTP calls answered, by endpoint and status."}, []string{"endpoint", "status"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "jetembed_gateway_request_seconds",
			Help:    "Time to answer an HTTP call, by endpoint.",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}}, []string{"endpoint"}),
		inputCount: prometheus.NewCounter(prometheus.CounterOpts{Name: "jetembed_gateway_inputs_total",
			Help: "Inputs (texts) received in embedding calls."}),
		fleet: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetembed_gateway_fleet_calls_total",
			Help: "Request-reply jobs sent to the fleet, by outcome: ok, an error code, no_member, timeout or fleet_error."}, []string{"outcome"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "jetembed_gateway_in_flight",
			Help: "HTTP calls being answered."}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "jetembed_gateway_connections_refused_total",
			Help: "Connections refused at the connection caps (no idle one to close for them)."}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.seconds, m.inputCount, m.fleet, m.inFlight, m.refused} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("gateway: metrics: %w", err)
		}
	}
	return m, nil
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (the body's
// read deadline).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (m *metrics) instrument(endpoint string, h http.Handler) http.Handler {
	if m == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		m.inFlight.Inc()
		defer m.inFlight.Dec()
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		m.requests.WithLabelValues(endpoint, strconv.Itoa(sw.status)).Inc()
		m.seconds.WithLabelValues(endpoint).Observe(time.Since(start).Seconds())
	})
}

func (m *metrics) refusedConn() {
	if m != nil {
		m.refused.Inc()
	}
}

func (m *metrics) inputs(n int) {
	if m != nil {
		m.inputCount.Add(float64(n))
	}
}

func (m *metrics) fleetCall(err error) {
	if m == nil {
		return
	}
	outcome := "ok"
	var se *schema.Error
	if errors.As(err, &se) {
		// Only known codes become labels: the fleet's words must not
		// grow the series without bound.
		outcome = "other"
		if _, ok := codeStatus[se.Code]; ok {
			outcome = string(se.Code)
		}
	} else if err != nil {
		outcome = fleetError(err).Code
	}
	m.fleet.WithLabelValues(outcome).Inc()
}
