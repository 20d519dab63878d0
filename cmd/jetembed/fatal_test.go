package main

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/fakes"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/schema"
)

// withRunnerFailure puts fail (an error fails the run, nil lets it
// through) under every session the commands open
// until the test ends.
func withRunnerFailure(t *testing.T, fail func(in engine.RunInput) error) {
	testRunner = func(_ int, r engine.Runner) engine.Runner { return &fakes.Runner{Runner: r, Fail: fail} }
	t.Cleanup(func() { testRunner = nil })
}

// ortStatus is an error as a C API wrapper makes it: its text is its own,
// the TensorRT message only in its cause.
type ortStatus struct{ cause error }

func (e ortStatus) Error() string { return "onnxruntime: Run: status 1" }
func (e ortStatus) Unwrap() error { return e.cause }

// TestServeExitsOnFatalEngineError: a TensorRT "failed to build engine"
// (deep in the error chain) makes serve give its jobs back without delay
// and exit 70; a peer answers the job.
func TestServeExitsOnFatalEngineError(t *testing.T) {
	var fired atomic.Bool
	withRunnerFailure(t, func(in engine.RunInput) error {
		if in.Seq >= 64 && fired.CompareAndSwap(false, true) {
			return ortStatus{cause: errors.New("[TensorRT EP] failed to build engine: engine_1")}
		}
		return nil
	})
	srv := natstest.RunServer(t)
	a := startServe(t, srv.ClientURL())
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc, client.WithRun("fatal"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(context.Background(), schema.NewJob("long", strings.Repeat("word ", 98))); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-a.done:
		a.done <- code
		if code != exitFatal {
			t.Fatalf("serve exited %d, want %d:\n%s", code, exitFatal, a.log.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not exit after the fatal error:\n%s", a.log.String())
	}
	if !strings.Contains(a.log.String(), "fatal engine error: giving the jobs back and exiting") ||
		!strings.Contains(a.log.String(), "failed to build engine") {
		t.Errorf("no fatal line naming the cause in the log:\n%s", a.log.String())
	}
	// The job went back at once: a peer that starts now answers it (a
	// NAK with delay would hold it for the backoff).
	startServe(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for sr, err := range c.Results(ctx, "fatal") {
		if err != nil {
			t.Fatal(err)
		}
		if r := sr.Result; r.Error != nil || len(r.Items) != 1 || r.Items[0].Error != nil {
			t.Errorf("result %+v: want the long text embedded by the peer", r)
		}
		break
	}
}

// TestWarmupStrict: a warm-up shape that fails is a start failure (exit
// 1) with --warmup-strict=on; with off it is a warning, and the ceiling is
// the longest shape that did warm; a fatal build error exits 70 either way.
func TestWarmupStrict(t *testing.T) {
	dir := tinyModel(t, "tiny-hidden")
	withRunnerFailure(t, func(in engine.RunInput) error {
		if in.Seq == 32 {
			return errors.New("out of memory")
		}
		return nil
	})
	args := []string{"warmup", "--model", dir, "--warmup-batches", "1", "--warmup-seqs", "8,16,32", "--probe=false", "--threads", "1", "--guard", "on", "--guard-seq", "8"}
	if code, _, errOut := run(t, "", append(args, "--warmup-strict", "on")...); code != 1 || !strings.Contains(errOut, "1x32") {
		t.Errorf("strict: exit %d, %q; want 1 naming 1x32", code, errOut)
	}
	code, out, errOut := run(t, "", append(args, "--warmup-strict", "off")...)
	if code != 0 || !strings.Contains(errOut, "warning") || !strings.Contains(errOut, "1x32") || !strings.Contains(out, "ceiling 16 tokens") {
		t.Errorf("off: exit %d\n%s\n%s; want a warning for 1x32 and ceiling 16", code, out, errOut)
	}
	// auto is off on cpu.
	if code, _, errOut := run(t, "", args...); code != 0 {
		t.Errorf("auto on cpu: exit %d: %s", code, errOut)
	}
	withRunnerFailure(t, func(in engine.RunInput) error {
		if in.Seq == 32 {
			return errors.New("TensorRT EP failed to create engine from network")
		}
		return nil
	})
	if code, _, errOut := run(t, "", append(args, "--warmup-strict", "off")...); code != exitFatal {
		t.Errorf("fatal with strict off: exit %d (%s), want %d", code, errOut, exitFatal)
	}
	if code, _, _ := run(t, "", append(args, "--warmup-strict", "maybe")...); code != 2 {
		t.Errorf("--warmup-strict maybe: exit %d, want 2", code)
	}
}
