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
	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/ort/enginetest"
	"github.com/jetembed/jetembed/fleet"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/jetstream/jstest"
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
type server = jstest.Server

// newServer starts a server and provisions the tests' config changed by
// edit: [jstest.Provisioned].
func newServer(t testing.TB, edit func(*jetstream.Config)) *server {
	t.Helper()
	return jstest.Provisioned(t, edit)
}

// connect is a connection that rides out server restarts.
func connect(t testing.TB, url string) *nats.Conn { return natstest.Connect(t, url) }

// store opens the engines bucket of srv through js as the fleet's store.
func store(t testing.TB, js natsjs.JetStream, srv *server) *jetstream.KVStore {
	t.Helper()
	return srv.Engines(t, js)
}

// startWorker runs a consumer on emb against srv, like serve does.
func startWorker(t testing.TB, srv *server, emb engine.Embedder, cfg consumer.Config, sink func(*consumer.Loop) jetstream.Sink) {
	t.Helper()
	nc := connect(t, srv.URL)
	cfg.Logger = testLogger(t)
	w, err := jetstream.StartWorker(context.Background(), nc, jetstream.WorkerConfig{
		Config: srv.Config, Consumer: cfg, Embedder: emb, Sink: sink,
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

type sinkFunc func(ctx context.Context, d consumer.Delivery) error

func (f sinkFunc) Submit(ctx context.Context, d consumer.Delivery) error { return f(ctx, d) }

func (d *deliveries) wrap(c *consumer.Loop) jetstream.Sink {
	d.max = map[string]uint64{}
	return sinkFunc(func(ctx context.Context, dl consumer.Delivery) error {
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

// renewedFor waits until every key has been renewed for span: a revision
// of it was written (by the server's clock) span or more after the one
// seen first. Any span above zero needs at least one renewal. A key that
// is gone meanwhile fails the test at once: the renewals did not hold it.
// Tests that check a key outlives its TTL wait on its renewals, not on a
// guessed sleep.
func renewedFor(t *testing.T, kv fleet.Store, span time.Duration, keys ...string) {
	t.Helper()
	first := map[string]fleet.Entry{}
	for _, key := range keys {
		e, err := kv.Get(context.Background(), key)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		first[key] = e
	}
	natstest.CheckFor(t, span+10*time.Second, 10*time.Millisecond, func() error {
		for _, key := range keys {
			e, err := kv.Get(context.Background(), key)
			if err != nil {
				t.Fatalf("%s while it is renewed (revision %d at %v first): %v", key, first[key].Revision, first[key].Created, err)
			}
			if d := e.Created.Sub(first[key].Created); d < span || e.Revision == first[key].Revision {
				return fmt.Errorf("%s renewed for %v of %v (revision %d, first %d)", key, d, span, e.Revision, first[key].Revision)
			}
		}
		return nil
	})
}
