package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/internal/telemetry"
	"github.com/jetembed/jetembed/internal/telemetry/export"
	"github.com/jetembed/jetembed/jetstream"
)

// The operator side of serve: tracing and metrics, the health server, and
// what feeds the gauges and the heartbeat line.

// startTelemetry sets up tracing and the metrics; stop flushes both.
func startTelemetry(ctx context.Context) (*export.Prometheus, func(), error) {
	shutdownTracing, err := export.SetupTracing(ctx, "jetembed", version)
	if err != nil {
		return nil, nil, err
	}
	prom, err := export.NewPrometheus()
	if err != nil {
		return nil, nil, err
	}
	return prom, func() {
		_ = prom.Shutdown(context.Background())
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdownTracing(c)
	}, nil
}

// startHTTP serves /healthz, /readyz and /metrics on addr (none when
// empty); stop ends the server and waits for it.
func startHTTP(ctx context.Context, log *slog.Logger, addr string, live *liveState, metrics http.Handler) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http: %w", err)
	}
	log.Info("http listening", "addr", ln.Addr().String())
	httpCtx, stopHTTP := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- telemetry.ServeListener(httpCtx, ln, live.health(), metrics) }()
	return func() {
		stopHTTP()
		<-done
	}, nil
}

// observe feeds the backlog gauges (from the worker's periodic consumer
// info: a consumer info request per scrape would put the server on the
// scrape path), the engine gauges and the heartbeat log line; the returned
// func stops it.
func observe(log *slog.Logger, metrics *telemetry.Metrics, w *jetstream.Worker, e *engine.Engine, heartbeat time.Duration) func() {
	bg, stop := context.WithCancel(context.Background())
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			recordEngineState(bg, metrics, e.Stats())
			select {
			case <-bg.Done():
				return
			case <-t.C:
			}
		}
	}()
	unobserve, err := metrics.ObserveConsumer(func(context.Context) (telemetry.ConsumerStats, error) {
		pending, ackPending := w.Backlog()
		return telemetry.ConsumerStats{Pending: pending, AckPending: ackPending}, nil
	})
	if err != nil {
		unobserve = func() error { return nil }
	}
	if heartbeat > 0 {
		go telemetry.Heartbeat(bg, log, heartbeat, func() telemetry.HeartbeatStats {
			st := w.Loop().Stats()
			pending, _ := w.Backlog()
			return telemetry.HeartbeatStats{Texts: st.Texts, Tokens: st.Tokens, Jobs: st.Jobs, Pending: pending, InFlight: st.Held}
		})
	}
	return func() {
		stop()
		_ = unobserve()
	}
}

// recordEngineState copies the engine's warmed shapes and per-session
// breaker state (a session that is not loaded is open) into the gauges.
func recordEngineState(ctx context.Context, m *telemetry.Metrics, st engine.Stats) {
	m.SetWarmedShapes(ctx, len(st.Warmed))
	for _, s := range st.Sessions {
		m.SetBreakerOpen(ctx, strconv.Itoa(s.Index), !s.Loaded)
	}
}
