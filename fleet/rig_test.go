package fleet_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/fleet"
	"github.com/jetembed/jetembed/internal/enginetest"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/jobloop"
	"github.com/jetembed/jetembed/schema"
)

// The fleet's tests run its members against a real server (in process,
// internal/natstest) through package jetstream's KV store, each member
// with its own engine: the tiny model on ONNX Runtime, CPU, where
// "compiling" a shape is its warm-up run.

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func testLogger(testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return quiet
}

func openEngine(t testing.TB, cfg engine.Config) *engine.Engine { return enginetest.Open(t, cfg) }

// server is a provisioned in-process NATS server.
type server struct {
	url string
	cfg jetstream.Config
	nc  *nats.Conn
	js  natsjs.JetStream
}

func newServer(t testing.TB, edit func(*jetstream.Config)) *server {
	t.Helper()
	url := natstest.RunServer(t).ClientURL()
	cfg := jetstream.DefaultConfig()
	cfg.Consumer.AckWait = 5 * time.Second
	cfg.Consumer.BackOff = nil
	if edit != nil {
		edit(&cfg)
	}
	nc := connect(t, url)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := jetstream.Provision(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	return &server{url: url, cfg: cfg, nc: nc, js: js}
}

// connect is a connection that rides out server restarts.
func connect(t testing.TB, url string) *nats.Conn { return natstest.Connect(t, url) }

// store opens the engines bucket of srv through js as the fleet's store.
func store(t testing.TB, js natsjs.JetStream, srv *server) *jetstream.KVStore {
	t.Helper()
	kv, err := jetstream.OpenKVStore(context.Background(), js, srv.cfg.Engines.Name)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// startWorker runs a consumer on emb against srv, like serve does.
func startWorker(t testing.TB, srv *server, emb engine.Embedder, cfg jobloop.Config, sink func(*jobloop.Loop) jetstream.Sink) {
	t.Helper()
	nc := connect(t, srv.url)
	cfg.Logger = testLogger(t)
	w, err := jetstream.StartWorker(context.Background(), nc, jetstream.WorkerConfig{
		Config: srv.cfg, Consumer: cfg, Embedder: emb, Sink: sink,
		Service: jetstream.ServiceOptions{Version: "test"}, Logger: cfg.Logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = w.Stop(ctx)
		_ = nc.Drain()
	})
}

// deliveries records the highest delivery count of each job id.
type deliveries struct {
	mu  sync.Mutex
	max map[string]uint64
}

type sinkFunc func(ctx context.Context, d jobloop.Delivery) error

func (f sinkFunc) Submit(ctx context.Context, d jobloop.Delivery) error { return f(ctx, d) }

func (d *deliveries) wrap(c *jobloop.Loop) jetstream.Sink {
	d.max = map[string]uint64{}
	return sinkFunc(func(ctx context.Context, dl jobloop.Delivery) error {
		var ct string
		if h := dl.Header[schema.HeaderContentType]; len(h) > 0 {
			ct = h[0]
		}
		// By the job id in the body: the Nats-Msg-Id is its hashed identity.
		if j, err := schema.DecodeJob(dl.Data, schema.EncodingFor(ct)); err == nil && j.ID != "" {
			d.mu.Lock()
			d.max[j.ID] = max(d.max[j.ID], dl.NumDelivered)
			d.mu.Unlock()
		}
		return c.Submit(ctx, dl)
	})
}

func (d *deliveries) of(id string) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.max[id]
}

// result waits for the result of job id of run.
func result(t *testing.T, c *client.Client, run, id string) *schema.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for sr, err := range c.Results(ctx, run) {
		if err != nil {
			t.Fatalf("results of %s: %v", run, err)
		}
		if sr.ID == id {
			return sr.Result
		}
	}
	t.Fatalf("no result for %s", id)
	return nil
}

// waitPasses waits until count (a counter of m's Stats) has grown by n
// from now: the member's worker has looked n more times. Tests that check
// something did not happen wait on it instead of a guessed sleep.
func waitPasses(t *testing.T, m *fleet.Member, count func(fleet.Stats) int64, n int64) {
	t.Helper()
	from := count(m.Stats())
	natstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if got := count(m.Stats()) - from; got < n {
			return fmt.Errorf("the worker looked %d of %d times; stats %+v", got, n, m.Stats())
		}
		return nil
	})
}
