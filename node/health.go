package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/internal/telemetry"
)

// liveState is what /readyz asks while the process starts and runs.
type liveState struct {
	loaded, warmed atomic.Bool
	// draining turns /readyz to 503 from the first moment of a shutdown,
	// so load balancers and Kubernetes route no new work here meanwhile.
	draining atomic.Bool
	// fatal turns /readyz to 503 for good: the engine met a fatal
	// engine-build error and the process is about to exit.
	fatal     atomic.Bool
	connected atomic.Pointer[func() bool]
	engine    atomic.Pointer[engine.Engine]
}

func (s *liveState) health() telemetry.Health {
	return telemetry.Health{
		ModelsLoaded: s.loaded.Load,
		WarmedUp:     s.warmed.Load,
		Draining:     func() bool { return s.draining.Load() || s.fatal.Load() },
		NATSConnected: func() bool {
			f := s.connected.Load()
			return f != nil && (*f)()
		},
		Canary: func(ctx context.Context) error {
			e := s.engine.Load()
			if e == nil {
				return errors.New("engine not loaded")
			}
			return e.Canary(ctx)
		},
	}
}

// startHTTP serves /healthz, /readyz and /metrics on addr (none when
// empty); stop ends the server and waits for it.
func startHTTP(log *slog.Logger, addr string, h telemetry.Health, metrics http.Handler) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http: %w", err)
	}
	log.Info("http listening", "addr", ln.Addr().String())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- telemetry.ServeListener(ctx, ln, h, metrics) }()
	return func() {
		cancel()
		<-done
	}, nil
}
