package gateway_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jetembed/jetembed/gateway"
	"github.com/jetembed/jetembed/internal/natstest"
)

func TestAuth(t *testing.T) {
	const key = "sk-test-0123456789"
	r := newRig(t, true, func(c *gateway.Config) { c.APIKey = key })
	for _, c := range []struct {
		method, path, body string
		header             []string
		status             int
	}{
		{"POST", "/v1/embeddings", `{"input":"a"}`, nil, 401},
		{"POST", "/v1/embeddings", `{"input":"a"}`, []string{"Authorization", "Bearer wrong"}, 401},
		{"POST", "/v1/embeddings", `{"input":"a"}`, []string{"Authorization", "Basic " + key}, 401},
		{"POST", "/v1/embeddings", `{"input":"a"}`, []string{"Authorization", "Bearer " + key + "x"}, 401},
		{"POST", "/v1/embeddings", `{"input":"a"}`, []string{"Authorization", "Bearer " + key}, 200},
		{"POST", "/v1/sparse-embeddings", `{"input":"a"}`, nil, 401},
		{"POST", "/v1/embeddings:both", `{"input":"a"}`, []string{"Authorization", "bearer " + key}, 200},
		{"GET", "/v1/models", "", nil, 401},
		{"GET", "/v1/models", "", []string{"Authorization", "Bearer " + key}, 200},
		{"GET", "/health/deep", "", nil, 401},
		{"GET", "/health", "", nil, 200}, // for load balancers
	} {
		a := r.do(t, c.method, c.path, c.body, c.header...)
		if a.status != c.status {
			t.Errorf("%s %s %v: %d %s, want %d", c.method, c.path, c.header, a.status, a.body, c.status)
		}
		if a.status == 401 && (a.errField("code") != "invalid_api_key" || a.errField("type") != "authentication_error") {
			t.Errorf("401 body %s", a.body)
		}
	}
	r.logMu.Lock()
	defer r.logMu.Unlock()
	if strings.Contains(r.logs.String(), key) {
		t.Errorf("the key is in the log: %s", r.logs.String())
	}

	// Auth off: no header needed.
	open := newRig(t, true, nil)
	if a := open.post(t, "/v1/embeddings", `{"input":"a"}`); a.status != 200 {
		t.Errorf("without a key configured: %d %s", a.status, a.body)
	}
}

func TestHealthModelsMetrics(t *testing.T) {
	r := newRig(t, true, nil)
	a := r.do(t, http.MethodGet, "/health", "")
	if a.status != 200 || !strings.HasPrefix(string(a.body), "ok") {
		t.Errorf("/health: %d %s", a.status, a.body)
	}
	a = r.do(t, http.MethodGet, "/v1/models", "")
	if a.status != 200 || !strings.Contains(string(a.body), `"id":"`+fakeModel+`"`) || a.json["object"] != "list" {
		t.Errorf("/v1/models: %d %s", a.status, a.body)
	}
	a = r.do(t, http.MethodGet, "/health/deep", "")
	if a.status != 200 || a.json["model"] != fakeModel || a.json["dimensions"] != 4.0 {
		t.Errorf("/health/deep: %d %s", a.status, a.body)
	}
	// The model is checked against what the fleet serves.
	for model, status := range map[string]int{fakeModel: 200, "bge-m3": 200, "BAAI/bge-m3": 200, "BGE-M3": 200, "bge-m4": 404} {
		if a := r.post(t, "/v1/embeddings", `{"input":"a","model":"`+model+`"}`); a.status != status {
			t.Errorf("model %q: %d %s", model, a.status, a.body)
		}
	}
	r.fake.svc.Stop()
	// A member answered recently: /health stays ok for the window, then
	// asks and says who is missing. The deep check fails at once.
	if a := r.do(t, http.MethodGet, "/health/deep", ""); a.status != 503 || a.errField("code") != "canary_failed" || !strings.Contains(a.errField("message"), "no_member") {
		t.Errorf("/health/deep without a fleet: %d %s", a.status, a.body)
	}

	fams, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]int{}
	for _, f := range fams {
		series[f.GetName()] = len(f.GetMetric())
	}
	for _, name := range gateway.MetricNames {
		if series[name] == 0 {
			t.Errorf("metric %s: no series in %v", name, series)
		}
	}
	if series["jetembed_gateway_requests_total"] < 3 || series["jetembed_gateway_fleet_calls_total"] < 2 {
		t.Errorf("series %v", series)
	}
}

func TestHealthWindow(t *testing.T) {
	r := newRig(t, true, func(c *gateway.Config) { c.HealthWindow = time.Millisecond })
	if a := r.do(t, http.MethodGet, "/health", ""); a.status != 200 {
		t.Fatalf("/health: %d %s", a.status, a.body)
	}
	r.fake.svc.Stop()
	time.Sleep(5 * time.Millisecond) // past the 1ms window
	a := r.do(t, http.MethodGet, "/health", "")
	if a.status != 503 || !strings.Contains(string(a.body), "no member of the embed service answered in the last 1ms") {
		t.Errorf("/health after the fleet left: %d %s", a.status, a.body)
	}
}

func TestTLS(t *testing.T) {
	caFile, certFile, keyFile := natstest.WriteTLS(t, t.TempDir())
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	if _, err := gateway.New(gateway.Config{Requester: fleet{}, TLSCertFile: certFile}); !errors.Is(err, gateway.ErrConfig) {
		t.Errorf("a certificate without its key: %v", err)
	}
	if _, err := gateway.New(gateway.Config{Requester: fleet{}, TLSCertFile: keyFile, TLSKeyFile: keyFile}); !errors.Is(err, gateway.ErrConfig) {
		t.Errorf("a key as the certificate: %v", err)
	}
	gw, err := gateway.New(gateway.Config{Requester: fleet{}, TLSCertFile: certFile, TLSKeyFile: keyFile})
	if err != nil || !gw.TLS() {
		t.Fatalf("tls gateway: %v", err)
	}
	addr := serve(t, gw)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := c.Get("https://" + addr + "/v1/unknown")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || !strings.Contains(string(body), "not_found") {
		t.Errorf("over https: %d %s", resp.StatusCode, body)
	}
	if resp, err := http.Get("http://" + addr + "/health"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain http on the https port: %d", resp.StatusCode)
		}
	}
}
