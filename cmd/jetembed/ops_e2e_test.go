package main

// End-to-end proofs of the operator-facing promises (issue 7), through the
// real parts: `jetembed serve` run by runMain, an in-process nats-server,
// the engine on the tiny model and ONNX Runtime from JETEMBED_ORT_LIB.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/engine/tokenizer"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/schema"
)

// served is a `jetembed serve` running in a goroutine through runMain, as
// main runs it; cancel is what SIGTERM does.
type served struct {
	cancel context.CancelFunc
	done   chan int
	log    *lockedBuffer
}

// startOps starts serve with the tiny model and test-friendly settings
// (later args override earlier ones) and returns at once.
func startOps(t *testing.T, url string, extra ...string) *served {
	t.Helper()
	model := tinyModel(t, "tiny-hidden")
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{cancel: cancel, done: make(chan int, 1), log: &lockedBuffer{}}
	args := append([]string{"serve", "--nats", url, "--model", model, "--threads", "1",
		"--warmup-batches", "", "--probe=false", "--heartbeat", "0", "--log-format", "json",
		"--http", "127.0.0.1:0", "--provision=create"}, extra...)
	go func() {
		s.done <- runMain(ctx, args, stdio{in: strings.NewReader(""), out: io.Discard, err: s.log})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop")
		}
		if t.Failed() {
			t.Logf("serve log:\n%s", s.log.String())
		}
	})
	return s
}

// logField waits (polling every millisecond) for the JSON log line whose
// msg is msg and returns its field key.
func (s *served) logField(t *testing.T, msg, key string) string {
	t.Helper()
	var value string
	natstest.CheckFor(t, 30*time.Second, time.Millisecond, func() error {
		select {
		case code := <-s.done:
			s.done <- code
			t.Fatalf("serve exited with %d before logging %q", code, msg)
		default:
		}
		for _, line := range strings.Split(s.log.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == msg {
				value = fmt.Sprint(m[key])
				return nil
			}
		}
		return fmt.Errorf("no %q log line yet", msg)
	})
	return value
}

func (s *served) waitReady(t *testing.T) { s.logField(t, "ready", "model") }

// get returns the status and body of an HTTP GET.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// scrape reads /metrics into series -> value ("name{label=...}" as the
// exposition format writes it).
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	code, body := get(t, "http://"+addr+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	series := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		series[line[:i]] = v
	}
	return series
}

// tokenCount is the number of tokens the tiny model's tokenizer makes of
// text, special tokens included: computed here, apart from the service.
func tokenCount(t *testing.T, texts ...string) int {
	t.Helper()
	tok, err := tokenizer.Load(filepath.Join(tinyModel(t, "tiny-hidden"), "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range texts {
		n += tok.Encode(s, tokenizer.Options{AddSpecialTokens: true, MaxTokens: -1}).Count
	}
	return n
}

// decodeMsg decodes a result message in the encoding its header names.
func decodeMsg(t *testing.T, m *nats.Msg) *schema.Result {
	t.Helper()
	res, err := schema.DecodeResult(m.Data, schema.EncodingFor(m.Header.Get(schema.HeaderContentType)))
	if err != nil {
		t.Fatalf("result on %s: %v", m.Subject, err)
	}
	return res
}

// checkVectors fails unless every item of res has a unit dense vector of
// the tiny model's width (32).
func checkVectors(t *testing.T, res *schema.Result, texts int) {
	t.Helper()
	if err := res.Err(); err != nil {
		t.Fatalf("result %s: %v", res.ID, err)
	}
	if len(res.Items) != texts {
		t.Fatalf("result %s: %d items, want %d", res.ID, len(res.Items), texts)
	}
	for i, it := range res.Items {
		var ss float64
		for _, x := range it.Dense {
			ss += float64(x) * float64(x)
		}
		if it.Error != nil || len(it.Dense) != 32 || math.Abs(ss-1) > 1e-3 {
			t.Errorf("result %s item %d: error %v, dense of %d values with squared norm %g", res.ID, i, it.Error, len(it.Dense), ss)
		}
	}
}

// TestOpsMetrics runs good, partly failing and refused jobs through serve
// and checks that /metrics moved by exactly what was sent: jobs and texts
// by outcome and code, TERMs by reason, and the tokens run, counted here
// with the tokenizer apart from the service.
func TestOpsMetrics(t *testing.T) {
	srv := natstest.RunServer(t)
	s := startOps(t, srv.ClientURL())
	addr := s.logField(t, "http listening", "addr")
	s.waitReady(t)
	before := scrape(t, addr)

	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc, client.WithRun("ops"))
	if err != nil {
		t.Fatal(err)
	}
	results, err := nc.SubscribeSync("embed.results.ops.>")
	if err != nil {
		t.Fatal(err)
	}
	jobs := [][]string{
		{"the first job has two texts", "the second of them"},
		{"a job of one text, somewhat longer than the others, with punctuation!"},
		{"x", "y", "Grüße aus Köln — 東京"},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var good []string
	for i, j := range jobs {
		good = append(good, j...)
		if _, err := c.Submit(ctx, schema.NewJob(fmt.Sprint("job-", i), j...)); err != nil {
			t.Fatal(err)
		}
	}
	// One text too long with truncate=false fails alone; its sibling runs.
	long := strings.Repeat("lorem ipsum dolor sit amet ", 2500)
	mixed := schema.NewJob("mixed", "a short sibling", long)
	no := false
	mixed.Truncate = &no
	if _, err := c.Submit(ctx, mixed); err != nil {
		t.Fatal(err)
	}
	good = append(good, "a short sibling")
	// A job refused as a whole (TERM, error result, dead letter), as a
	// producer outside Go would send it.
	bad := &nats.Msg{Subject: "embed.jobs.ops", Header: nats.Header{"Content-Type": {"application/json"}},
		Data: []byte(`{"id":"bad","texts":["a","b"],"outputs":["nope"],"reply":"embed.results.ops.bad"}`)}
	if err := nc.PublishMsg(bad); err != nil {
		t.Fatal(err)
	}

	usage := 0
	for range len(jobs) + 2 {
		m, err := results.NextMsg(20 * time.Second)
		if err != nil {
			t.Fatalf("waiting for results: %v", err)
		}
		res := decodeMsg(t, m)
		switch res.ID {
		case "bad":
			if res.Error == nil || res.Error.Code != schema.CodeUnknownOutput {
				t.Errorf("bad job: error %v, want unknown_output", res.Error)
			}
		case "mixed":
			if len(res.Items) != 2 || res.Items[1].Error == nil || res.Items[1].Error.Code != schema.CodeTextTooLong {
				t.Fatalf("mixed job: %+v, want the long text to fail with text_too_long", res)
			}
			checkVectors(t, &schema.Result{ID: res.ID, Items: res.Items[:1]}, 1)
		default:
			n, _ := strconv.Atoi(strings.TrimPrefix(res.ID, "job-"))
			checkVectors(t, res, len(jobs[n]))
		}
		usage += res.Usage.Tokens
	}

	wantTokens := tokenCount(t, good...)
	if usage != wantTokens {
		t.Errorf("results report %d tokens, the tokenizer makes %d of the texts that ran", usage, wantTokens)
	}
	want := map[string]float64{
		`jetembed_jobs_total{code="none",outcome="ok"}`:              float64(len(jobs) + 1),
		`jetembed_jobs_total{code="unknown_output",outcome="term"}`:  1,
		`jetembed_texts_total{code="none",outcome="ok"}`:             float64(len(good)),
		`jetembed_texts_total{code="text_too_long",outcome="error"}`: 1,
		`jetembed_texts_total{code="unknown_output",outcome="term"}`: 2,
		`jetembed_terms_total{reason="unknown_output"}`:              1,
		`jetembed_tokens_total`:                                      float64(wantTokens),
	}
	delta := func(after map[string]float64, series string) float64 { return after[series] - before[series] }
	var after map[string]float64
	// Metrics are recorded after the ACK or TERM, which follow the publish
	// the test saw: poll until the job counters caught up.
	natstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		after = scrape(t, addr)
		for _, series := range []string{`jetembed_jobs_total{code="none",outcome="ok"}`, `jetembed_jobs_total{code="unknown_output",outcome="term"}`} {
			if d := delta(after, series); d < want[series] {
				return fmt.Errorf("%s moved by %g", series, d)
			}
		}
		return nil
	})
	for series, w := range want {
		if got := delta(after, series); got != w {
			t.Errorf("%s moved by %g, want %g", series, got, w)
		}
	}
	// The engine's state gauges: the session is loaded (breaker closed)
	// and the shapes it ran count as warmed.
	if v, ok := after[`jetembed_breaker_open{session="0"}`]; !ok || v != 0 {
		t.Errorf(`jetembed_breaker_open{session="0"} = %g (present %v), want 0`, v, ok)
	}
	// The engine's own facts: tokenize time, and runs per session (not
	// one "embed" pseudo-session timing whole Embed calls).
	for _, series := range []string{`jetembed_tokenize_seconds_count`, `jetembed_run_seconds_count`, `jetembed_session_busy_seconds_total{session="0"}`} {
		if v := after[series]; v <= 0 {
			t.Errorf("%s = %g after jobs ran", series, v)
		}
	}
	if _, ok := after[`jetembed_session_busy_seconds_total{session="embed"}`]; ok {
		t.Error(`jetembed_session_busy_seconds_total{session="embed"}: the consumer's Embed calls counted as a session`)
	}
	natstest.CheckFor(t, 15*time.Second, 100*time.Millisecond, func() error {
		if n := scrape(t, addr)["jetembed_warmed_shapes"]; n < 1 {
			return fmt.Errorf("jetembed_warmed_shapes = %g after jobs ran", n)
		}
		return nil
	})
	if p := delta(after, "jetembed_padded_tokens_total"); p < float64(wantTokens) {
		t.Errorf("padded tokens moved by %g, fewer than the %d real ones", p, wantTokens)
	}
	for series, v := range after {
		family := series[:strings.IndexAny(series+"{", "{")]
		if _, expected := want[series]; !expected && v != before[series] &&
			(family == "jetembed_jobs_total" || family == "jetembed_texts_total" || family == "jetembed_terms_total" || family == "jetembed_naks_total") {
			t.Errorf("%s moved by %g, want 0", series, v-before[series])
		}
	}
}
