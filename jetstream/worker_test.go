package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/fakes"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/jetstream/jstest"
	"github.com/jetembed/jetembed/schema"
)

// The worker's timing is the server's: the caller's consumer.Config says
// AckWait 1m and MaxDeliver 5, the server says 1.5s and 2. The final error
// result comes on delivery 2, and a job that runs longer than the server's
// AckWait is heartbeated within it (delivered once).
func TestWorkerTakesTheServersSettings(t *testing.T) {
	srv := newServer(t, func(c *jetstream.Config) {
		c.Consumer.AckWait, c.Consumer.MaxDeliver, c.Consumer.MaxAckPending = 1500*time.Millisecond, 2, 16
	})
	e := openEngine(t, engine.Config{Guard: true, GuardSeq: 16})
	slow := &fakes.Embedder{Embedder: e, Hold: 4 * time.Second}
	var seen deliveries
	w := startWorker(t, srv, slow, workerOptions{
		cfg: consumer.Config{Delivery: consumer.DeliveryLimits{AckWait: time.Minute, MaxDeliver: 5},
			NakBackoff: consumer.Backoff{Base: 50 * time.Millisecond, Max: 50 * time.Millisecond, Jitter: -1}},
		sink: seen.wrap,
	})
	if st := w.w.Settings(); st.AckWait != 1500*time.Millisecond || st.MaxDeliver != 2 || st.MaxAckPending != 16 {
		t.Fatalf("worker settings %+v, want the server's", st)
	}
	if l := w.cons.DeliveryLimits(); l.AckWait != 1500*time.Millisecond || l.MaxDeliver != 2 {
		t.Fatalf("consumer limits %+v, want the server's", l)
	}
	if p := w.w.Prefetch(); p > 16 {
		t.Errorf("prefetch %d above the server's MaxAckPending 16", p)
	}
	c, err := client.New(srv.nc, client.WithRun("truth"))
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range []*schema.Job{schema.NewJob("slow", "short"), schema.NewJob("never", longText)} {
		if _, err := c.Submit(context.Background(), j); err != nil {
			t.Fatal(err)
		}
	}
	got := collect(t, c, "truth", []string{"slow", "never"})
	if r := got["never"]; r.Error == nil || r.Error.Code != schema.CodeShapeNotWarmed || !r.Error.Retriable {
		t.Fatalf("final result %+v, want a retriable shape_not_warmed error", r)
	}
	if n := seen.of("never"); n != 2 {
		t.Errorf("the refused job was delivered %d times, want the server's MaxDeliver 2", n)
	}
	checkResult(t, e, got["slow"], []string{"short"}, nil)
	if n := seen.of("slow"); n != 1 {
		t.Errorf("the slow job was delivered %d times: not heartbeated within the server's AckWait", n)
	}
	settledAll(t, srv)
}

// Settings changed on the server (by `jetembed provision`) reach a running
// worker: the job loop takes them and the fetch loop is reopened.
func TestWorkerRefreshesChangedSettings(t *testing.T) {
	srv := newServer(t, nil)
	e := openEngine(t, engine.Config{})
	nc := connect(t, srv.url)
	w, err := jetstream.StartWorker(context.Background(), nc, jetstream.WorkerConfig{
		Config: srv.cfg, Embedder: e, Refresh: 50 * time.Millisecond, Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background())
	cfg := srv.cfg
	cfg.Consumer.AckWait, cfg.Consumer.MaxDeliver, cfg.Consumer.MaxAckPending = 3*time.Second, 3, 8
	jstest.Provision(t, srv.js, cfg)
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if l := w.Loop().DeliveryLimits(); l.AckWait != 3*time.Second || l.MaxDeliver != 3 {
			return fmt.Errorf("consumer limits %+v", l)
		}
		if p := w.Prefetch(); p > 8 {
			return fmt.Errorf("prefetch %d above the new MaxAckPending", p)
		}
		return nil
	})
	c, err := client.New(srv.nc, client.WithRun("refresh"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(t.Context(), schema.NewJob("after", "after the reopen")); err != nil {
		t.Fatal(err)
	}
	checkResult(t, e, collect(t, c, "refresh", []string{"after"})["after"], []string{"after the reopen"}, nil)
}

// A worker whose connection closes stops on its own and says why.
func TestWorkerStopsOnItsOwn(t *testing.T) {
	srv := newServer(t, nil)
	nc := connect(t, srv.url)
	w, err := jetstream.StartWorker(context.Background(), nc, jetstream.WorkerConfig{
		Config: srv.cfg, Embedder: openEngine(t, engine.Config{}), Grace: time.Second, Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	if w.Err() != nil {
		t.Fatalf("Err before the stop: %v", w.Err())
	}
	nc.Close()
	select {
	case <-w.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("worker did not stop after its connection closed")
	}
	if !errors.Is(w.Err(), jetstream.ErrWorkerStopped) {
		t.Errorf("Err = %v, want ErrWorkerStopped", w.Err())
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Errorf("Stop after the worker stopped: %v", err)
	}
}

func TestStartWorkerWithoutConsumer(t *testing.T) {
	srv := natstest.RunServer(t)
	nc := connect(t, srv.ClientURL())
	_, err := jetstream.StartWorker(context.Background(), nc, jetstream.WorkerConfig{
		Config: jetstream.DefaultConfig(), Embedder: engine.EmbedderFunc(nil), Logger: testLogger(t),
	})
	if err == nil {
		t.Fatal("StartWorker without the consumer on the server: no error")
	}
}
