package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// startServe runs serve against url with the tiny model, no HTTP server,
// and waits until it logs that it is ready.
func startServe(t *testing.T, url string, extra ...string) *served {
	t.Helper()
	s := startOps(t, url, append([]string{"--http", ""}, extra...)...)
	s.waitReady(t)
	return s
}

// logValue returns the first value of key in a JSON log line whose msg is
// msg.
func logValue(logs, msg, key string) string {
	for _, line := range strings.Split(logs, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == msg {
			return fmt.Sprint(m[key])
		}
	}
	return ""
}

func TestServeDrainsOnSIGTERM(t *testing.T) {
	srv := natstest.RunServer(t)
	if code, _, errOut := runCmd(t, context.Background(), "provision", "--nats", srv.ClientURL(), "--ack-wait", "2s"); code != 0 {
		t.Fatalf("provision: exit %d: %s", code, errOut)
	}
	s := startServe(t, srv.ClientURL(), "--http", "127.0.0.1:0", "--grace", "20s", "--log-level", "debug", "--provision=off")
	defer func() {
		if t.Failed() {
			t.Log(s.log.String())
		}
	}()
	addr := logValue(s.log.String(), "http listening", "addr")
	if addr == "" {
		t.Fatalf("no http address logged: %s", s.log.String())
	}
	for _, path := range []string{"/readyz", "/readyz?deep=1", "/healthz"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
		}
	}

	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc, client.WithRun("drain"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	long := strings.Repeat("every job holds a longer text so that the queue takes a while ", 8)
	for i := range n {
		if _, err := c.Submit(context.Background(), schema.NewJob(fmt.Sprint(i), long, fmt.Sprint("job ", i))); err != nil {
			t.Fatal(err)
		}
	}
	js, _ := natsjs.New(nc)
	count := func(stream string) uint64 { return natstest.StreamCount(t, js, stream) }
	natstest.CheckFor(t, 30*time.Second, 5*time.Millisecond, func() error {
		if count("EMBED_RESULTS") == 0 {
			return errors.New("no results yet")
		}
		return nil
	})
	// /readyz is polled from before the SIGTERM until the HTTP server is
	// gone: the drain (batches of long texts to finish, the connection to
	// drain) must show as 503 naming draining, never as ready.
	readiness := make(chan readinessSeen, 1)
	go func() { readiness <- pollReadiness("http://" + addr + "/readyz") }()
	s.cancel() // SIGTERM
	select {
	case code := <-s.done:
		if code != 0 {
			t.Fatalf("exit %d after SIGTERM: %s", code, s.log.String())
		}
		s.done <- code
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not exit after SIGTERM")
	}
	if seen := <-readiness; seen.draining == 0 || seen.readyAfter > 0 {
		t.Errorf("/readyz during the drain: %d answers 503 naming draining, then %d ready; want some, then none", seen.draining, seen.readyAfter)
	}
	results, left := count("EMBED_RESULTS"), count("EMBED_JOBS")
	t.Logf("at SIGTERM: %d jobs done, %d given back", results, left)
	if results+left != n {
		t.Errorf("%d results + %d queued jobs != %d: a job was lost or ran twice", results, left, n)
	}
	if left == 0 {
		t.Log("every job finished before the drain: the test did not catch work in flight")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	jc, err := js.Consumer(ctx, "EMBED_JOBS", "embedder")
	if err != nil {
		t.Fatal(err)
	}
	// Given back, not abandoned: the jobs the drain NAKed are available at
	// once; one the server routed to the fetch loop's inbox after it closed
	// comes back after the 2s AckWait.
	if left == 0 {
		return
	}
	batch, err := jc.Fetch(int(left), natsjs.FetchMaxWait(6*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// A job serve took comes again as a second delivery; one it never
	// took is a first. Which sequences fall on which side is not checked:
	// the server puts a message it fetched for a pull request that had
	// gone (the fetch loop's, at the drain) back on its redelivery queue
	// with the delivery undone (nats-server's consumer.go,
	// decDeliveryCount), so a first delivery can sit below a job serve
	// took. CI once saw that: stream sequence 98 first, 100 second.
	got, again := 0, 0
	for m := range batch.Messages() {
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		if md.NumDelivered >= 2 {
			again++
		}
		got++
	}
	t.Logf("%d given-back jobs had been taken by serve, %d never", again, got-again)
	if uint64(got) != left {
		t.Errorf("%d of the %d given-back jobs could be fetched again at once", got, left)
	}
	if !strings.Contains(s.log.String(), `"msg":"stopped"`) {
		t.Errorf("no stopped line: %s", s.log.String())
	}
}

// readinessSeen is what pollReadiness saw of /readyz.
type readinessSeen struct {
	draining   int // 503 naming draining
	readyAfter int // 200 after a draining 503: readiness came back
}

// pollReadiness polls url every millisecond until it stops answering (the
// HTTP server shut down).
func pollReadiness(url string) readinessSeen {
	var seen readinessSeen
	client := &http.Client{Timeout: 5 * time.Second}
	for {
		resp, err := client.Get(url)
		if err != nil {
			return seen
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(body), "draining"):
			seen.draining++
		case resp.StatusCode == http.StatusOK && seen.draining > 0:
			seen.readyAfter++
		}
		time.Sleep(time.Millisecond)
	}
}

func TestServePrintConfig(t *testing.T) {
	t.Setenv("JETEMBED_NATS_PASSWORD", "secret")
	code, out, errOut := runCmd(t, context.Background(), "serve", "--print-config", "--in-flight-tokens", "999")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"--in-flight-tokens=999\tJETEMBED_IN_FLIGHT_TOKENS\n",
		"--nats-password=<set>\tJETEMBED_NATS_PASSWORD\n",
		"--http=127.0.0.1:9090\tJETEMBED_HTTP\n",
		"--model=\tJETEMBED_MODEL\n",
		"--provision=off\tJETEMBED_PROVISION\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("print-config lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "secret") {
		t.Error("print-config shows the password")
	}
	// The consumer's settings are the server's: serve has no flags for them.
	for _, gone := range []string{"--ack-wait=", "--max-deliver=", "--max-ack-pending=", "--backoff="} {
		if strings.Contains(out, gone) {
			t.Errorf("serve still has %s:\n%s", gone, out)
		}
	}
}

// TestServeBudgetFlags: the job loop's token budgets reach the node's
// configuration as given, and their defaults follow the engine's batch
// size and sessions (4 and 2 runs of every session). --interactive-tokens
// is the one interactive knob: the engine's interactive admission is the
// same number.
func TestServeBudgetFlags(t *testing.T) {
	const runs = 2048 * 3
	for _, tc := range []struct {
		args                  []string
		inFlight, interactive int
	}{
		{[]string{"--in-flight-tokens", "999", "--interactive-tokens", "1234"}, 999, 1234},
		{nil, 4 * runs, 2 * runs},
	} {
		sc := addServeCommand(newFlagSet("serve", stdio{in: strings.NewReader(""), out: io.Discard, err: io.Discard}), true, true, "off")
		c, done, err := sc.parse(append([]string{"--max-batch-tokens", "2048", "--sessions", "3"}, tc.args...),
			stdio{out: io.Discard, err: io.Discard})
		if err != nil || done {
			t.Fatalf("parse: done %v, %v", done, err)
		}
		if got := c.Runtime; got.InteractiveTokens != tc.interactive || got.InFlightTokens != tc.inFlight {
			t.Errorf("%q: node budgets %d in flight, %d interactive: want %d, %d", tc.args, got.InFlightTokens, got.InteractiveTokens, tc.inFlight, tc.interactive)
		}
	}
}

// TestServeTenantWeightOneKnob: --tenant-weight is one setting for both
// places fairness lives: the engine's admission queue and the per-tenant
// pulling; a bad value is a usage error. --max-tenants reaches the
// per-tenant pulling, at least 1.
func TestServeTenantWeightOneKnob(t *testing.T) {
	parse := func(args ...string) (serveConfig, error) {
		sc := addServeCommand(newFlagSet("serve", stdio{in: strings.NewReader(""), out: io.Discard, err: io.Discard}), true, true, "off")
		c, _, err := sc.parse(args, stdio{out: io.Discard, err: io.Discard})
		return c, err
	}
	c, err := parse("--tenant-weight", "acme=3,*=2")
	if err != nil {
		t.Fatal(err)
	}
	if w := c.Engine.Engine.TenantWeights; w["acme"] != 3 || w["*"] != 2 {
		t.Errorf("engine weights %v", w)
	}
	if s := c.Runtime.Fair.Shares; s.Weight("acme") != 3 || s.Weight("other") != 2 {
		t.Errorf("pull weights %v", s.Weights)
	}
	if _, err := parse("--tenant-weight", "acme=zero"); !errors.Is(err, errUsage) {
		t.Errorf("--tenant-weight acme=zero: %v, want a usage error", err)
	}
	if c.Runtime.Fair.MaxTenants != jetstream.DefaultMaxTenants {
		t.Errorf("max tenants %d, want the default %d", c.Runtime.Fair.MaxTenants, jetstream.DefaultMaxTenants)
	}
	if c, err := parse("--max-tenants", "7"); err != nil || c.Runtime.Fair.MaxTenants != 7 {
		t.Errorf("--max-tenants 7: %d, %v", c.Runtime.Fair.MaxTenants, err)
	}
	if _, err := parse("--max-tenants", "0"); !errors.Is(err, errUsage) {
		t.Errorf("--max-tenants 0: %v, want a usage error", err)
	}
}

// TestServeTenantNames: with --tenant-names (JWT mode's key -> name
// file) the tenant settings may name a tenant by name: weights, quotas and
// interactive tenants apply to its keys (both, after a key rotation), a
// tenant given by its key keeps its own setting, and the metrics get the
// table; a bad file is a usage error.
func TestServeTenantNames(t *testing.T) {
	parse := func(args ...string) (serveConfig, error) {
		sc := addServeCommand(newFlagSet("serve", stdio{in: strings.NewReader(""), out: io.Discard, err: io.Discard}), true, true, "off")
		c, _, err := sc.parse(args, stdio{out: io.Discard, err: io.Discard})
		return c, err
	}
	const old, key, other = "AOLDKEY", "ANEWKEY", "AOTHER"
	file := filepath.Join(t.TempDir(), "tenants.tsv")
	if err := os.WriteFile(file, []byte(old+"\tacme\n"+key+"\tacme\n"+other+"\tglobex\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := parse("--tenant-names", file, "--tenant-weight", "acme=3,AOTHER=5,globex=4,*=2",
		"--tenant-quota", "acme=600/100", "--interactive-tenants", "acme,initech")
	if err != nil {
		t.Fatal(err)
	}
	if w := c.Engine.Engine.TenantWeights; w[old] != 3 || w[key] != 3 || w[other] != 5 || w["*"] != 2 || len(w) != 4 {
		t.Errorf("engine weights %v, want acme's keys 3, AOTHER its own 5, * 2", w)
	}
	if q := c.Runtime.Fair.Shares.Quotas; q[key].TokensPerMinute != 600 || q[old].InFlight != 100 || len(q) != 2 {
		t.Errorf("quotas %v, want acme's two keys", q)
	}
	if got := fmt.Sprint(c.Runtime.Loop.InteractiveTenants); got != "["+key+" "+old+" initech]" && got != "["+old+" "+key+" initech]" {
		t.Errorf("interactive tenants %s", got)
	}
	if n := c.Runtime.TenantNames; n[key] != "acme" || n[other] != "globex" {
		t.Errorf("metrics names %v", n)
	}
	// A name must be a name of tenant add's: no reserved or invalid
	// metrics label, no default (*), no key of the file.
	for _, bad := range []string{"not a table", "AKEY\t*other", "AKEY\t*", "AKEY\t\xff\xfe", "AKEY\tAcme", "AKEY\tBKEY\nBKEY\tbeta"} {
		if err := os.WriteFile(file, []byte(bad+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := parse("--tenant-names", file); !errors.Is(err, errUsage) {
			t.Errorf("--tenant-names file %q: %v, want a usage error", bad, err)
		}
	}
}

// TestRemovedFlags: the flags issue 31 removed are refused, as flags and
// as variables, with what to set instead named, in every command that had
// them; nothing else is printed.
func TestRemovedFlags(t *testing.T) {
	clearEnv(t)
	ctx := context.Background()
	for _, tc := range []struct {
		cmd, flag, instead string
	}{
		{"serve", "patience", "drop it"},
		{"dev", "patience", "drop it"},
		{"serve", "gather-tokens", "--in-flight-tokens"},
		{"serve", "engine-interactive-tokens", "--interactive-tokens"},
		{"embed", "engine-interactive-tokens", "--interactive-tokens"},
		{"warmup", "engine-interactive-tokens", "--interactive-tokens"},
	} {
		code, out, errOut := runCmd(t, ctx, tc.cmd, "--"+tc.flag, "1")
		first, _, _ := strings.Cut(errOut, "\n")
		if code != 2 || out != "" || !strings.Contains(first, "--"+tc.flag+" was removed") || !strings.Contains(first, tc.instead) {
			t.Errorf("%s --%s: exit %d, stdout %q, stderr:\n%s", tc.cmd, tc.flag, code, out, errOut)
		}
		if n := strings.Count(errOut, "\n"); n > 3 {
			t.Errorf("%s --%s: %d lines of error, want 3:\n%s", tc.cmd, tc.flag, n, errOut)
		}
		env := envName(tc.flag)
		t.Setenv(env, "1")
		// No flags: the variable is refused before anything starts (the
		// cancelled context ends a command that wrongly started).
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		args := []string{tc.cmd}
		if tc.cmd == "dev" {
			args = append(args, "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "", "--http-api", "")
		}
		code, _, errOut = runCmd(t, cancelled, args...)
		os.Unsetenv(env)
		if code != 2 || !strings.Contains(errOut, env) || !strings.Contains(errOut, tc.instead) {
			t.Errorf("%s with %s set: exit %d, stderr:\n%s", tc.cmd, env, code, errOut)
		}
	}
}

// TestServeInteractiveTenants: --interactive-tenants reaches the
// job loop: "*" (the default) is every tenant, a list those tenants, an
// empty value none.
func TestServeInteractiveTenants(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, nil},
		{[]string{"--interactive-tenants", "*"}, nil},
		{[]string{"--interactive-tenants", "gateway, producer-a,"}, []string{"gateway", "producer-a"}},
		{[]string{"--interactive-tenants", ""}, []string{}},
	} {
		sc := addServeCommand(newFlagSet("serve", stdio{in: strings.NewReader(""), out: io.Discard, err: io.Discard}), true, true, "off")
		c, done, err := sc.parse(tc.args, stdio{out: io.Discard, err: io.Discard})
		if err != nil || done {
			t.Fatalf("parse: done %v, %v", done, err)
		}
		got := c.Runtime.Loop.InteractiveTenants
		if (got == nil) != (tc.want == nil) || !slices.Equal(got, tc.want) {
			t.Errorf("%q: %#v, want %#v", tc.args, got, tc.want)
		}
	}
}

// TestServeResultPrecision: TensorRT's FP16 engines give other vectors
// than fp32 ones of the same model, so the result cache's keys name fp16
// (a member with --fp16 and one without never answer each other's texts);
// otherwise the engine names its own precision at start.
func TestServeResultPrecision(t *testing.T) {
	parse := func(args ...string) serveConfig {
		t.Helper()
		sc := addServeCommand(newFlagSet("serve", stdio{in: strings.NewReader(""), out: io.Discard, err: io.Discard}), true, true, "off")
		c, _, err := sc.parse(args, stdio{out: io.Discard, err: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, ""},
		{[]string{"--provider", "tensorrt", "--fleet-sm", "8.9"}, ""},
		{[]string{"--provider", "tensorrt", "--fleet-sm", "8.9", "--fp16"}, "fp16"},
		{[]string{"--provider", "cuda", "--fleet-sm", "8.9", "--fp16"}, ""}, // --fp16 is TensorRT's alone
	} {
		if got := parse(tc.args...).Runtime.Loop.Precision; got != tc.want {
			t.Errorf("serve %q: the cache's precision %q, want %q", tc.args, got, tc.want)
		}
	}
}
