package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetembed/jetembed/internal/natstest"
)

// post sends body to url and returns the status, the Retry-After and the
// error code of the answer.
func post(t *testing.T, url, body string, timeout time.Duration) (status int, retryAfter, code string, err error) {
	t.Helper()
	c := &http.Client{Timeout: timeout}
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	return resp.StatusCode, resp.Header.Get("Retry-After"), e.Error.Code, nil
}

// TestGatewayFailsFastOnNATSOutage is reproduction 4 of issue 24: when
// the NATS server goes away (a real nats-server process killed) under
// `jetembed gateway` and serve, a call
// in flight used to wait out --api-timeout (30 s, then 504) and so did
// every new call. Now the call in flight is answered 503
// fleet_unreachable with Retry-After at the outage, new calls at once,
// and calls succeed again once the server is back.
func TestGatewayFailsFastOnNATSOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts a nats-server process")
	}
	p := natstest.StartProcess(t)
	s := startServe(t, p.URL(), "--http", "127.0.0.1:0")
	ops := s.logField(t, "http listening", "addr")
	runs := func() float64 { return scrape(t, ops)["jetembed_run_seconds_count"] }
	// The gateway as its own process would run it, in front of serve.
	gctx, stop := context.WithCancel(context.Background())
	gwLog := &lockedBuffer{}
	gwDone := make(chan int, 1)
	go func() {
		gwDone <- runMain(gctx, []string{"gateway", "--nats", p.URL(), "--listen", "127.0.0.1:0", "--http", "", "--log-format", "json"},
			stdio{in: strings.NewReader(""), out: io.Discard, err: gwLog})
	}()
	t.Cleanup(func() {
		stop()
		<-gwDone
		if t.Failed() {
			t.Logf("gateway log:\n%s", gwLog.String())
		}
	})
	var api string
	natstest.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		if api = logValue(gwLog.String(), "http api listening", "addr"); api == "" || logValue(gwLog.String(), "ready", "nats") == "" {
			return fmt.Errorf("gateway not ready")
		}
		return nil
	})
	api = "http://" + api + "/v1/embeddings"
	if status, _, code, err := post(t, api, `{"input":"before"}`, 30*time.Second); status != 200 {
		t.Fatalf("before the outage: %d %s %v", status, code, err)
	}

	// A call that takes seconds on the tiny model: 128 texts of 300 words.
	_, words := corpusTexts(t)
	texts := make([]string, 128)
	for i := range texts {
		texts[i] = strings.Join(words[i*7:i*7+300], " ")
	}
	body, _ := json.Marshal(map[string]any{"input": texts})
	type answer struct {
		status           int
		retryAfter, code string
		err              error
		at               time.Time
	}
	inFlight := make(chan answer, 1)
	before := runs()
	go func() {
		status, ra, code, err := post(t, api, string(body), 60*time.Second)
		inFlight <- answer{status, ra, code, err, time.Now()}
	}()
	// In flight at the member: a chunk of it has run, and many are left.
	natstest.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		if n := runs(); n <= before {
			return fmt.Errorf("%v session runs, %v before the long call", n, before)
		}
		return nil
	})
	select {
	case a := <-inFlight:
		t.Fatalf("the long call ended before the outage: %+v", a)
	default:
	}
	killed := time.Now()
	p.Kill()
	a := <-inFlight
	if took := a.at.Sub(killed); a.status != 503 || a.code != "fleet_unreachable" || a.retryAfter == "" || took > 3*time.Second {
		t.Errorf("the call in flight at the outage: %d %s Retry-After %q %v, %s after the kill", a.status, a.code, a.retryAfter, a.err, took)
	}
	start := time.Now()
	if status, ra, code, err := post(t, api, `{"input":"during"}`, 30*time.Second); status != 503 || code != "fleet_unreachable" || ra == "" || time.Since(start) > time.Second {
		t.Errorf("a call during the outage: %d %s Retry-After %q %v after %s", status, code, ra, err, time.Since(start))
	}

	p.Restart()
	natstest.CheckFor(t, 60*time.Second, 200*time.Millisecond, func() error {
		status, _, code, err := post(t, api, `{"input":"after"}`, 30*time.Second)
		if status != 200 {
			return fmt.Errorf("after the restart: %d %s %v", status, code, err)
		}
		return nil
	})
}
