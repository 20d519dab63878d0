package gateway

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/jetembed/jetembed/schema"
)

// pingTimeout bounds one $SRV.INFO request of /health and of the model
// lookup.
const pingTimeout = 2 * time.Second

// health remembers when a member last answered and which model the fleet
// serves. Concurrent pings share one request, and concurrent deep checks
// one canary.
type health struct {
	pinger Pinger
	last   atomic.Int64 // unix nanoseconds of the last answer
	model  atomic.Pointer[string]
	dim    atomic.Int64 // dense dimension seen, 0 until a dense vector came back
	ver    atomic.Pointer[string]
	flight singleflight.Group
}

func (h *health) answered(now time.Time) { h.last.Store(now.UnixNano()) }

func (h *health) sawModel(m string) {
	if p := h.model.Load(); p == nil || *p != m {
		h.model.Store(&m)
	}
}

func (h *health) sawVersion(v string) { h.ver.Store(&v) }

func (h *health) memberVersion() string {
	if p := h.ver.Load(); p != nil {
		return *p
	}
	return ""
}

func (h *health) servedModel() string {
	if p := h.model.Load(); p != nil {
		return *p
	}
	return ""
}

// since is how long ago a member last answered (a very long time if never).
func (h *health) since(now time.Time) time.Duration {
	last := h.last.Load()
	if last == 0 {
		return time.Duration(math.MaxInt64)
	}
	return now.Sub(time.Unix(0, last))
}

// shared runs f once for all the callers asking for key meanwhile, detached
// from any one caller's ctx so that its hanging up fails no other.
func (h *health) shared(ctx context.Context, key string, timeout time.Duration, f func(context.Context) (any, error)) (any, error) {
	ch := h.flight.DoChan(key, func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		return f(fctx)
	})
	select {
	case r := <-ch:
		return r.Val, r.Err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// ping asks one member who it is.
func (h *health) ping(ctx context.Context) error {
	if h.pinger == nil {
		return errors.New("no pinger configured and no call answered yet")
	}
	_, err := h.shared(ctx, "ping", pingTimeout, func(ctx context.Context) (any, error) {
		m, err := h.pinger.Ping(ctx)
		if err == nil {
			h.answered(time.Now())
			if m.Model != "" {
				h.sawModel(m.Model)
			}
		}
		return nil, err
	})
	return err
}

// handleHealth answers 200 "ok" when a member answered within the health
// window (asking one if none did), and 503 saying why otherwise.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	window := s.cfg.HealthWindow
	if s.linkDown() {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "unavailable: the gateway has no connection to NATS")
		return
	}
	ago := s.health.since(time.Now())
	if ago >= window {
		if err := s.health.ping(r.Context()); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "unavailable: no member of the embed service answered in the last %s: %v\n", window, err)
			return
		}
		ago = s.health.since(time.Now())
	}
	fmt.Fprintf(w, "ok: a member of the embed service (model %s) answered %s ago\n", s.health.servedModel(), ago.Round(time.Millisecond))
}

// canaryText is what /health/deep embeds.
const canaryText = "jetembed gateway canary"

// handleDeep embeds the canary text through the fleet and checks the
// vector: 200 with the model and timing, or 503 with the error.
func (s *Server) handleDeep(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	v, err := s.health.shared(r.Context(), "deep", min(s.cfg.Timeout, 10*time.Second), func(ctx context.Context) (any, error) {
		out, err := s.embed(ctx, []string{canaryText}, nil, nil)
		if err == nil {
			err = checkCanary(out.items[0])
		}
		return out, err
	})
	if err != nil {
		ae := fleetError(err)
		writeError(w, newError(http.StatusServiceUnavailable, codeCanaryFailed, "canary embed failed: %s: %s", ae.Code, ae.Message), s.retryAfter())
		return
	}
	out := v.(*embedded)
	writeJSON(w, http.StatusOK, map[string]any{
		"status": "ok", "model": out.model, "dimensions": len(out.items[0].Dense),
		"took_ms": time.Since(start).Milliseconds(),
	})
}

func checkCanary(it schema.Item) error {
	if it.Error != nil {
		return it.Error
	}
	if len(it.Dense) == 0 {
		return errors.New("no dense vector")
	}
	var sum float64
	for _, f := range it.Dense {
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			return errors.New("the vector is not finite")
		}
		sum += float64(f) * float64(f)
	}
	if math.Abs(math.Sqrt(sum)-1) > 1e-3 {
		return fmt.Errorf("the dense vector has norm %.4f, want 1", math.Sqrt(sum))
	}
	return nil
}

// handleModels lists the model the fleet serves.
func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	m, aerr := s.model(r.Context())
	if aerr != nil {
		writeError(w, aerr, s.retryAfter())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data":   []map[string]any{{"id": m, "object": "model", "created": 0, "owned_by": "jetembed"}},
	})
}

// model is the served model id, asking a member when no answer named it.
func (s *Server) model(ctx context.Context) (string, *apiError) {
	if m := s.health.servedModel(); m != "" {
		return m, nil
	}
	if err := s.health.ping(ctx); err != nil {
		return "", newError(http.StatusServiceUnavailable, codeNoMember, "no member of the embed service answered: %v", err)
	}
	if m := s.health.servedModel(); m != "" {
		return m, nil
	}
	return "", newError(http.StatusServiceUnavailable, codeNoMember, "the member that answered did not name its model")
}

// checkModel accepts an empty model, the served id (name@sha), its name,
// and the name behind an organization prefix (BAAI/bge-m3 for bge-m3).
// While the served model is unknown (no member answers) the call goes on
// and fails on its own.
func (s *Server) checkModel(ctx context.Context, want string) *apiError {
	if want == "" {
		return nil
	}
	served, aerr := s.model(ctx)
	if aerr != nil {
		return nil
	}
	name, _, _ := strings.Cut(served, "@")
	base := want[strings.LastIndex(want, "/")+1:]
	if strings.EqualFold(want, served) || strings.EqualFold(want, name) || strings.EqualFold(base, name) {
		return nil
	}
	e := newError(http.StatusNotFound, codeModelNotFound, "the model %s is not served here: the fleet serves %q (GET /v1/models)", short(want), served)
	e.Param = "model"
	return e
}
