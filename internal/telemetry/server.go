package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// DefaultAddr is serve's default --http address: loopback, so a
// process started by hand does not expose its metrics. Containers set
// JETEMBED_HTTP=0.0.0.0:9090.
const DefaultAddr = "127.0.0.1:9090"

// DefaultCanaryTimeout bounds a deep readiness check when
// [Health.CanaryTimeout] is zero.
const DefaultCanaryTimeout = 5 * time.Second

// Health is what the HTTP endpoints ask the process. A nil callback is a
// condition that does not apply to this process and counts as met.
type Health struct {
	// ModelsLoaded reports that the model and tokenizer are loaded.
	ModelsLoaded func() bool
	// WarmedUp reports that the warm-up grid has run.
	WarmedUp func() bool
	// NATSConnected reports that the NATS connection is up.
	NATSConnected func() bool
	// Draining reports that the process is shutting down: it is then not
	// ready, so load balancers and Kubernetes stop routing to it while it
	// finishes its work.
	Draining func() bool
	// Canary embeds a known text end to end for /readyz?deep=1 and returns
	// an error when the result is missing or wrong.
	Canary func(ctx context.Context) error
	// CanaryTimeout bounds one canary run; zero means DefaultCanaryTimeout.
	CanaryTimeout time.Duration
}

// Readiness is the JSON body of /readyz.
type Readiness struct {
	Ready bool `json:"ready"`
	// NotReady names the unmet conditions: models, warmup, nats, draining,
	// canary.
	NotReady []string `json:"not_ready,omitempty"`
	// Error is the canary's error, on a failed deep check.
	Error string `json:"error,omitempty"`
}

// Handler returns the mux of /healthz, /readyz and /metrics, the last
// served by metrics (export.Prometheus.Handler); metrics may be nil, and
// /metrics then answers 404.
func Handler(h Health, metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		// Liveness says only that the process answers: a Kubernetes restart
		// would not fix a lost NATS connection or a model still loading.
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	c := &canary{check: h.Canary}
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		rd := h.ready()
		if rd.Ready && r.URL.Query().Get("deep") == "1" && h.Canary != nil {
			timeout := h.CanaryTimeout
			if timeout <= 0 {
				timeout = DefaultCanaryTimeout
			}
			if err := c.run(r.Context(), timeout); err != nil {
				rd = Readiness{NotReady: []string{"canary"}, Error: err.Error()}
			}
		}
		writeReadiness(w, rd)
	})
	if metrics == nil {
		metrics = http.NotFoundHandler()
	}
	mux.Handle("GET /metrics", metrics)
	return mux
}

func (h Health) ready() Readiness {
	var rd Readiness
	for _, c := range []struct {
		name string
		ok   func() bool
	}{{"models", h.ModelsLoaded}, {"warmup", h.WarmedUp}, {"nats", h.NATSConnected}} {
		if c.ok != nil && !c.ok() {
			rd.NotReady = append(rd.NotReady, c.name)
		}
	}
	if h.Draining != nil && h.Draining() {
		rd.NotReady = append(rd.NotReady, "draining")
	}
	rd.Ready = len(rd.NotReady) == 0
	return rd
}

func writeReadiness(w http.ResponseWriter, rd Readiness) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !rd.Ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(rd)
}

// canary lets concurrent deep checks share one run: probes from several
// kubelets or a load balancer must not queue canary texts on a busy GPU.
type canary struct {
	check func(context.Context) error

	mu     sync.Mutex
	flight *canaryCall
}

type canaryCall struct {
	done chan struct{}
	err  error
}

func (c *canary) run(ctx context.Context, timeout time.Duration) error {
	c.mu.Lock()
	call := c.flight
	if call == nil {
		call = &canaryCall{done: make(chan struct{})}
		c.flight = call
		// The run is detached from the first caller's request, so its
		// hanging up does not fail the check for the others waiting.
		go func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
			defer cancel()
			call.err = c.check(cctx)
			if call.err == nil && cctx.Err() != nil {
				call.err = cctx.Err()
			}
			c.mu.Lock()
			c.flight = nil
			c.mu.Unlock()
			close(call.done)
		}()
	}
	c.mu.Unlock()
	select {
	case <-call.done:
		return call.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ServeListener answers /healthz, /readyz and /metrics on ln, which the
// caller opened (so it knows the address, and a taken port fails before
// anything starts), until ctx is done, then shuts the server down
// gracefully. It returns nil after a shutdown caused by ctx, and the serve
// error otherwise. It closes ln.
func ServeListener(ctx context.Context, ln net.Listener, h Health, metrics http.Handler) error {
	srv := &http.Server{
		Handler:           Handler(h, metrics),
		ReadHeaderTimeout: 5 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("telemetry: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	if err != nil {
		return fmt.Errorf("telemetry: shutdown: %w", err)
	}
	return nil
}
