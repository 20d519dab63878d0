package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func get(t *testing.T, h http.Handler, target string) (int, Readiness) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	var rd Readiness
	if rec.Header().Get("Content-Type") == "application/json" {
		if err := json.Unmarshal(rec.Body.Bytes(), &rd); err != nil {
			t.Fatalf("GET %s: body %q: %v", target, rec.Body, err)
		}
	}
	return rec.Code, rd
}

func TestReadyz(t *testing.T) {
	var models, warm, nats, draining atomic.Bool
	h := Handler(Health{ModelsLoaded: models.Load, WarmedUp: warm.Load, NATSConnected: nats.Load, Draining: draining.Load}, nil)

	if code, _ := get(t, h, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while loading = %d, want 200", code)
	}
	steps := []struct {
		set          *atomic.Bool
		wantCode     int
		wantNotReady []string
	}{
		{nil, 503, []string{"models", "warmup", "nats"}},
		{&models, 503, []string{"warmup", "nats"}},
		{&nats, 503, []string{"warmup"}},
		{&warm, 200, nil},
	}
	for _, s := range steps {
		if s.set != nil {
			s.set.Store(true)
		}
		code, rd := get(t, h, "/readyz")
		if code != s.wantCode || rd.Ready != (s.wantCode == 200) || !slices.Equal(rd.NotReady, s.wantNotReady) {
			t.Errorf("/readyz = %d %+v, want %d not_ready=%v", code, rd, s.wantCode, s.wantNotReady)
		}
	}
	// Losing NATS makes the pod unready again, but still alive.
	nats.Store(false)
	if code, rd := get(t, h, "/readyz"); code != 503 || !slices.Equal(rd.NotReady, []string{"nats"}) {
		t.Errorf("/readyz after disconnect = %d %+v", code, rd)
	}
	if code, _ := get(t, h, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz after disconnect = %d, want 200", code)
	}
	// A draining process stops taking traffic while it finishes its work.
	nats.Store(true)
	draining.Store(true)
	if code, rd := get(t, h, "/readyz"); code != 503 || !slices.Equal(rd.NotReady, []string{"draining"}) {
		t.Errorf("/readyz while draining = %d %+v", code, rd)
	}
}

func TestReadyzDeep(t *testing.T) {
	var canaryErr error
	var runs atomic.Int32
	h := Handler(Health{Canary: func(context.Context) error {
		runs.Add(1)
		return canaryErr
	}}, nil)

	if code, _ := get(t, h, "/readyz?deep=1"); code != 200 {
		t.Errorf("deep readyz with a passing canary = %d, want 200", code)
	}
	canaryErr = errors.New("dense vector has norm 0")
	code, rd := get(t, h, "/readyz?deep=1")
	if code != 503 || !slices.Equal(rd.NotReady, []string{"canary"}) || rd.Error != canaryErr.Error() {
		t.Errorf("deep readyz with a failing canary = %d %+v", code, rd)
	}
	// The shallow check does not run the canary.
	before := runs.Load()
	if code, _ := get(t, h, "/readyz"); code != 200 || runs.Load() != before {
		t.Errorf("shallow readyz = %d and ran the canary %d times", code, runs.Load()-before)
	}
}

func TestReadyzDeepTimeout(t *testing.T) {
	h := Handler(Health{
		CanaryTimeout: 20 * time.Millisecond,
		Canary: func(ctx context.Context) error {
			<-ctx.Done() // a session stuck on a hung GPU
			return nil
		},
	}, nil)
	code, rd := get(t, h, "/readyz?deep=1")
	if code != 503 || rd.Error != context.DeadlineExceeded.Error() {
		t.Errorf("deep readyz with a hung canary = %d %+v, want 503 with deadline exceeded", code, rd)
	}
}

// TestReadyzDeepShared checks that concurrent deep probes share one canary
// run instead of queueing one each. In a synctest bubble every probe is
// known to be waiting on the run before it ends, so exactly one runs.
func TestReadyzDeepShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var runs atomic.Int32
		h := Handler(Health{Canary: func(context.Context) error {
			runs.Add(1)
			<-release
			return nil
		}}, nil)
		const probes = 8
		var wg sync.WaitGroup
		codes := make([]int, probes)
		for i := range probes {
			wg.Go(func() { codes[i], _ = get(t, h, "/readyz?deep=1") })
		}
		synctest.Wait() // every probe waits on the run, which waits on release
		close(release)
		wg.Wait()
		for i, c := range codes {
			if c != 200 {
				t.Errorf("probe %d = %d, want 200", i, c)
			}
		}
		if n := runs.Load(); n != 1 {
			t.Errorf("canary ran %d times for %d concurrent probes, want once", n, probes)
		}
	})
}

func TestServe(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("jetembed_guard_refusals_total 1\n"))
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeListener(ctx, ln, Health{}, metrics) }()

	base := "http://" + ln.Addr().String()
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 200, "/nope": 404} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s = %d, want %d", path, resp.StatusCode, want)
		}
		if path == "/metrics" && !strings.Contains(string(body), "jetembed_guard_refusals_total 1") {
			t.Errorf("/metrics is not the metrics handler's:\n%s", body)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ServeListener after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeListener did not return after cancel")
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("server still answers after shutdown")
	}
}
