package node

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/internal/telemetry"
	"github.com/jetembed/jetembed/jetstream"
)

// observe feeds the backlog gauges and the heartbeat log line from the
// worker's consumer-info sampler (a consumer info request per scrape would
// put the server on the scrape path), and the engine gauges; the returned
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
