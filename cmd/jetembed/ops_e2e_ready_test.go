package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/internal/telemetry"
	"github.com/jetembed/jetembed/schema"
)

// TestOpsReadyAfterWarmup checks that /readyz answers 503, naming the
// warm-up, while the model warms, and 200 from then on.
func TestOpsReadyAfterWarmup(t *testing.T) {
	srv := natstest.RunServer(t)
	// A grid long enough (nine shapes up to 4096 tokens) that the first
	// poll, made as soon as the HTTP server is up, falls before it ends.
	s := startOps(t, srv.ClientURL(), "--warmup-batches", "1", "--warmup-seqs", "256,384,512,768,1024,1536,2048,3072,4096")
	addr := s.logField(t, "http listening", "addr")
	code, body := get(t, "http://"+addr+"/readyz")
	var rd telemetry.Readiness
	if err := json.Unmarshal([]byte(body), &rd); err != nil {
		t.Fatalf("/readyz body %q: %v", body, err)
	}
	if code != http.StatusServiceUnavailable || rd.Ready || !strings.Contains(strings.Join(rd.NotReady, ","), "warmup") {
		t.Fatalf("/readyz before warm-up: %d %s, want 503 naming warmup", code, body)
	}
	if c, _ := get(t, "http://"+addr+"/healthz"); c != http.StatusOK {
		t.Errorf("/healthz during warm-up: %d, want 200 (alive, not ready)", c)
	}
	natstest.CheckFor(t, 60*time.Second, 5*time.Millisecond, func() error {
		if code, body := get(t, "http://"+addr+"/readyz"); code != http.StatusOK {
			return fmt.Errorf("/readyz: %d %s", code, body)
		}
		return nil
	})
	for range 5 {
		if code, body := get(t, "http://"+addr+"/readyz?deep=1"); code != http.StatusOK {
			t.Fatalf("deep /readyz after warm-up: %d %s", code, body)
		}
	}
}

// brokenModel copies the tiny model with a config.json that claims 20000
// positions while the graph has 8194: a long enough text then fails inside
// ONNX Runtime (position index out of range), a real run error.
func brokenModel(t *testing.T) string {
	t.Helper()
	src, dir := tinyModel(t, "tiny-hidden"), t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == "config.json" {
			b = []byte(strings.Replace(string(b), `"max_position_embeddings": 8194`, `"max_position_embeddings": 20002`, 1))
			if !strings.Contains(string(b), "20002") {
				t.Fatal("config.json of the tiny model changed: cannot raise max_position_embeddings")
			}
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestOpsDeepReadinessBrokenSession breaks the model session for real (a
// run error trips the breaker and the model file is gone, so the reload
// fails) and checks that deep readiness reports it while shallow readiness
// stays up, and that both recover when the file is back.
func TestOpsDeepReadinessBrokenSession(t *testing.T) {
	srv := natstest.RunServer(t)
	dir := brokenModel(t)
	s := startOps(t, srv.ClientURL(), "--model", dir, "--no-verify", "--breaker-threshold", "1")
	addr := s.logField(t, "http listening", "addr")
	s.waitReady(t)
	if code, body := get(t, "http://"+addr+"/readyz?deep=1"); code != http.StatusOK {
		t.Fatalf("deep /readyz of a healthy session: %d %s", code, body)
	}

	onnx := filepath.Join(dir, "model.onnx")
	if err := os.Rename(onnx, onnx+".away"); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("lorem ipsum dolor sit amet ", 2500)
	if n := tokenCount(t, long); n <= 8194 {
		t.Fatalf("the long text has %d tokens; it must exceed the graph's 8194 positions", n)
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.Request(ctx, schema.NewJob("poison", long))
	if res == nil {
		t.Fatalf("request: %v", err)
	}
	if res.Err() == nil && (len(res.Items) != 1 || res.Items[0].Error == nil) {
		t.Fatalf("a text past the graph's positions embedded without error: %+v", res)
	}

	code, body := get(t, "http://"+addr+"/readyz?deep=1")
	var rd telemetry.Readiness
	_ = json.Unmarshal([]byte(body), &rd)
	if code != http.StatusServiceUnavailable || !strings.Contains(strings.Join(rd.NotReady, ","), "canary") || rd.Error == "" {
		t.Errorf("deep /readyz with the session down: %d %s, want 503 naming the canary and its error", code, body)
	}
	if code, body := get(t, "http://"+addr+"/readyz"); code != http.StatusOK {
		t.Errorf("shallow /readyz with the session down: %d %s, want 200 (deep checks are for alerting)", code, body)
	}

	if err := os.Rename(onnx+".away", onnx); err != nil {
		t.Fatal(err)
	}
	// The session retries its reload every second.
	natstest.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		if code, body := get(t, "http://"+addr+"/readyz?deep=1"); code != http.StatusOK {
			return errors.New(body)
		}
		return nil
	})
}
