package jetstream_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/ort/enginetest"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/jetstream/jstest"
	"github.com/jetembed/jetembed/schema"
)

// The end-to-end tests run the real parts: an in-process nats-server with
// JetStream, the provisioned streams, the consumer loop, and the engine on
// the committed tiny model through ONNX Runtime.

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return quiet
}

// openEngine opens the tiny hidden-state model on one CPU session.
func openEngine(t testing.TB, cfg engine.Config) *engine.Engine {
	t.Helper()
	return openEngineWith(t, cfg, nil)
}

// openEngineWith is openEngine with every session's runner passed through
// wrap (nil: none), for tests that control when runs finish.
func openEngineWith(t testing.TB, cfg engine.Config, wrap func(engine.Runner) engine.Runner) *engine.Engine {
	t.Helper()
	return enginetest.OpenWith(t, cfg, wrap)
}

// sinkFunc lets a test look at (or change) deliveries on their way in.
type sinkFunc func(ctx context.Context, d consumer.Delivery) error

func (f sinkFunc) Submit(ctx context.Context, d consumer.Delivery) error { return f(ctx, d) }

// server is one nats-server with the jetembed streams provisioned
// ([jstest.Server]).
type server struct {
	url string
	cfg jetstream.Config
	nc  *nats.Conn
	js  natsjs.JetStream
}

// newServer starts a server and provisions cfg (the tests' config changed
// by edit): [jstest.Provisioned].
func newServer(t testing.TB, edit func(*jetstream.Config)) *server {
	t.Helper()
	return rigOf(jstest.Provisioned(t, edit))
}

// provisioned provisions the server at url: [jstest.ProvisionedAt].
func provisioned(t testing.TB, url string, edit func(*jetstream.Config)) *server {
	t.Helper()
	return rigOf(jstest.ProvisionedAt(t, url, edit))
}

// rigOf is s under the names this package's tests use.
func rigOf(s *jstest.Server) *server { return &server{url: s.URL, cfg: s.Config, nc: s.NC, js: s.JS} }

// connect is a connection that rides out server restarts.
func connect(t testing.TB, url string) *nats.Conn { return natstest.Connect(t, url) }

// worker is one consumer process: its connection and its [jetstream.Worker].
type worker struct {
	nc   *nats.Conn
	w    *jetstream.Worker
	cons *consumer.Loop
}

type workerOptions struct {
	cfg   consumer.Config
	blobs bool                                // store oversized results in the blobs bucket, as serve --blobs
	sink  func(*consumer.Loop) jetstream.Sink // wraps the consumer
	pull  []jetstream.PullOption
	// subject is the request-reply endpoint; empty: the default.
	subject string
	// tokenizer serves the tokenize endpoint; nil: none.
	tokenizer jetstream.Tokenizer
}

// startWorker runs a consumer on emb against srv, like serve does.
func startWorker(t testing.TB, srv *server, emb engine.Embedder, o workerOptions) *worker {
	t.Helper()
	nc := connect(t, srv.url)
	log := o.cfg.Logger
	if log == nil {
		log = testLogger(t)
	}
	w, err := jetstream.StartWorker(context.Background(), nc, jetstream.WorkerConfig{
		Config: srv.cfg, Consumer: o.cfg, Embedder: emb, Sink: o.sink, Blobs: o.blobs,
		Service: jetstream.ServiceOptions{Version: "test", Subject: o.subject, Tokenizer: o.tokenizer}, Pull: o.pull, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	wk := &worker{nc: nc, w: w, cons: w.Loop()}
	t.Cleanup(func() { wk.stop(t, time.Second) })
	return wk
}

// runWorker starts a worker of cfg on a connection of its own to srv,
// with srv's configuration, version "test" and the test's logger unless
// cfg names others, and stops it when the test ends.
func runWorker(t *testing.T, srv *server, cfg jetstream.WorkerConfig) *jetstream.Worker {
	t.Helper()
	cfg.Config = srv.cfg
	if cfg.Service.Version == "" {
		cfg.Service.Version = "test"
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	nc := connect(t, srv.url)
	w, err := jetstream.StartWorker(context.Background(), nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
		nc.Close()
	})
	return w
}

// stop shuts the worker down as serve does on SIGTERM.
func (w *worker) stop(t testing.TB, grace time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	_ = w.w.Stop(ctx)
	_ = w.nc.Drain()
}

// fleetHeader is the Nats-Msg-Id header the embedder gives the result of
// tenant's job id stored on subject: the results reader takes nothing else
// as a result.
func fleetHeader(tenant, subject, id string) map[string][]string {
	return map[string][]string{schema.HeaderMsgID: {schema.ResultMsgID(tenant, subject, id)}}
}

func publishRaw(t testing.TB, js natsjs.JetStream, subject string, h map[string][]string, data []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: subject, Header: nats.Header(h), Data: data}); err != nil {
		t.Fatal(err)
	}
}
