package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/jetstream/devserver"
	"github.com/jetembed/jetembed/schema"
)

// natsEnv is one embedded nats-server with the jetembed streams provisioned
// and a producer client on it. Handles of nats.go types stay inside
// closures, so this package never names them.
type natsEnv struct {
	cfg    jetstream.Config
	client *client.Client
	// results returns how many results the results stream holds.
	results func(ctx context.Context) (uint64, error)
	// seen counts the distinct results of the run stored so far.
	seen *resultCounter
	// startWorker runs a consumer on emb like serve does: fetch loop,
	// publisher and request-reply service. stop drains it.
	startWorker func(ctx context.Context, emb engine.Embedder, cc consumer.Config) (stop func(), err error)
	// startCacheWorker is startWorker with the result cache on (serve
	// --cache kv: the EMBED_CACHE bucket, which provisioning made).
	startCacheWorker func(ctx context.Context, emb engine.Embedder, cc consumer.Config) (stop func(), err error)
	// startFair is startWorker with serve's --tenant-weight shares.
	startFair func(ctx context.Context, emb engine.Embedder, cc consumer.Config, fair jetstream.FairConfig) (stop func(), err error)
	// newClient is a producer client of its own on the server's
	// connection (a tenant's, with client.WithTenant).
	newClient func(opts ...client.Option) (*client.Client, error)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// withNATS starts a fresh embedded server in a temporary directory, runs f
// and tears everything down.
func withNATS(ctx context.Context, f func(env *natsEnv) error) error {
	return withNATSConfig(ctx, nil, f)
}

// withNATSConfig is withNATS with the provisioned configuration changed by
// mod first (nil: the defaults).
func withNATSConfig(ctx context.Context, mod func(*jetstream.Config), f func(env *natsEnv) error) error {
	dir, err := os.MkdirTemp("", "jetembed-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var url string
	if bin := os.Getenv(serverProcessEnv); bin != "" {
		u, stop, err := startServerProcess(bin, dir)
		if err != nil {
			return err
		}
		defer stop()
		url = u
	} else {
		srv, err := devserver.Start(devserver.Options{Listen: "127.0.0.1:0", DataDir: dir})
		if err != nil {
			return err
		}
		defer func() {
			srv.Shutdown()
			srv.WaitForShutdown()
		}()
		url = srv.ClientURL()
	}
	opts := jetstream.Options{URLs: []string{url}, Name: "jetembed-bench", Logger: quiet}
	nc, err := jetstream.Connect(ctx, opts)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cfg := jetstream.DefaultConfig()
	if mod != nil {
		mod(&cfg)
	}
	if _, err := jetstream.Provision(ctx, js, cfg); err != nil {
		return fmt.Errorf("provision: %w", err)
	}
	c, err := client.New(nc, client.WithRun("bench"))
	if err != nil {
		return err
	}
	env := &natsEnv{cfg: cfg, client: c}
	env.results = func(ctx context.Context) (uint64, error) {
		s, err := js.Stream(ctx, cfg.Results.Name)
		if err != nil {
			return 0, err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return 0, err
		}
		return info.State.Msgs, nil
	}
	env.startWorker = func(ctx context.Context, emb engine.Embedder, cc consumer.Config) (func(), error) {
		return startWorker(ctx, opts, cfg, emb, cc, false, jetstream.FairConfig{})
	}
	env.startCacheWorker = func(ctx context.Context, emb engine.Embedder, cc consumer.Config) (func(), error) {
		return startWorker(ctx, opts, cfg, emb, cc, true, jetstream.FairConfig{})
	}
	env.startFair = func(ctx context.Context, emb engine.Embedder, cc consumer.Config, fair jetstream.FairConfig) (func(), error) {
		return startWorker(ctx, opts, cfg, emb, cc, false, fair)
	}
	env.newClient = func(o ...client.Option) (*client.Client, error) { return client.New(nc, o...) }
	return f(env)
}

// readResults starts a reader of the run's results (the producer's own, an
// ordered consumer) that counts them as they are stored, for waitResults;
// only the bulk runs start it (it decodes every result, which the latency
// runs should not pay for). stop ends the reader and waits.
func (env *natsEnv) readResults(ctx context.Context) (stop func()) {
	env.seen = &resultCounter{ch: make(chan struct{}, 1), ids: map[string]struct{}{}}
	rctx, cancel := context.WithCancel(ctx)
	read := make(chan struct{})
	go func() {
		defer close(read)
		// A result that does not decode still counts: it was stored.
		for res := range env.client.Results(rctx, env.client.Run()) {
			if res.Subject != "" {
				cached := 0
				if res.Result != nil {
					cached = res.Usage.Cached
				}
				env.seen.add(res.Subject, cached)
			}
		}
	}()
	return func() { cancel(); <-read }
}

// startWorker runs a worker like serve's on its own connection, as a serve
// process would have, with the result cache on when cache is and fair's
// shares; stop drains it.
func startWorker(ctx context.Context, opts jetstream.Options, cfg jetstream.Config, emb engine.Embedder, cc consumer.Config, cache bool, fair jetstream.FairConfig) (stop func(), err error) {
	wnc, err := jetstream.Connect(ctx, opts)
	if err != nil {
		return nil, err
	}
	w, err := jetstream.StartWorker(ctx, wnc, jetstream.WorkerConfig{
		Config: cfg, Consumer: cc, Embedder: emb, Cache: cache,
		Service: jetstream.ServiceOptions{Version: "0.0.0-bench"}, Logger: quiet, Fair: fair,
	})
	if err != nil {
		wnc.Close()
		return nil, err
	}
	return func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = w.Stop(dctx)
		cancel()
		// Drain is asynchronous; wait until the connection is closed, so
		// that no pull request of this worker is left on the server to
		// take jobs queued next (they would wait out the ack wait).
		_ = wnc.Drain()
		for deadline := time.Now().Add(10 * time.Second); !wnc.IsClosed() && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
	}, nil
}

// queue submits every job; ids are "<prefix>-<index>".
func (env *natsEnv) queue(ctx context.Context, prefix string, jobs [][]string) error {
	for i, texts := range jobs {
		if _, err := env.client.Submit(ctx, schema.NewJob(fmt.Sprintf("%s-%d", prefix, i), texts...)); err != nil {
			return fmt.Errorf("submit job %d: %w", i, err)
		}
	}
	return nil
}

// resultCounter counts distinct results (by subject: one per job), sums
// their usage.cached (the texts the fleet's cache answered) and signals on
// ch after each new one.
type resultCounter struct {
	mu     sync.Mutex
	ids    map[string]struct{}
	cached int
	ch     chan struct{}
}

func (c *resultCounter) add(key string, cached int) {
	c.mu.Lock()
	if _, ok := c.ids[key]; !ok {
		c.ids[key] = struct{}{}
		c.cached += cached
	}
	c.mu.Unlock()
	select {
	case c.ch <- struct{}{}:
	default:
	}
}

func (c *resultCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ids)
}

// cachedTexts is the sum of usage.cached over the distinct results.
func (c *resultCounter) cachedTexts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cached
}

// waitResults waits until n distinct results (one per job: a redelivered
// job's second result has the same subject) were stored, as the results
// reader sees them; it sleeps on the reader and never polls the server:
// polling stream info every 2 ms during a timed run took ~10% of the
// sessions' CPU on a 2-core machine (pipeline/bare 0.88 instead of 0.99).
// [natsEnv.readResults] must have started first.
func (env *natsEnv) waitResults(ctx context.Context, n uint64) error {
	for uint64(env.seen.count()) < n {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d results: %w", env.seen.count(), n, ctx.Err())
		case <-env.seen.ch:
		}
	}
	return nil
}

// Bulk is one bulk run through NATS.
type Bulk struct {
	Rate
	Jobs int
	// PeakRSS is the process's VmHWM during the run (reset at its start),
	// and BaseRSS its VmRSS just before, in bytes; zero when unknown.
	PeakRSS, BaseRSS int64
}

// bulkRun queues jobs on a fresh server, then starts a worker on emb and
// times it from start to the last result stored. The queue is filled first
// so that the worker never waits for the producer.
func bulkRun(ctx context.Context, emb engine.Embedder, cc consumer.Config, jobs [][]string) (Bulk, error) {
	var b Bulk
	b.Jobs = len(jobs)
	for _, j := range jobs {
		b.Texts += len(j)
	}
	err := withNATS(ctx, func(env *natsEnv) error {
		if err := env.queue(ctx, "bulk", jobs); err != nil {
			return err
		}
		stopReading := env.readResults(ctx)
		defer stopReading()
		b.BaseRSS = rss("VmRSS")
		resetPeakRSS()
		start, cpu := time.Now(), cpuTime()
		stop, err := env.startWorker(ctx, emb, cc)
		if err != nil {
			return err
		}
		defer stop()
		rctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
		defer cancel()
		if err := env.waitResults(rctx, uint64(len(jobs))); err != nil {
			return err
		}
		b.Elapsed, b.CPU = time.Since(start), cpuTime()-cpu
		b.PeakRSS = rss("VmHWM")
		return nil
	})
	return b, err
}

// counting wraps an embedder and sums the tokens it ran, so that a pipeline
// run reports its padding like a bare run does.
type counting struct {
	engine.Embedder // the model id and token limit pass through
	mu              sync.Mutex
	tokens, padded  int
}

func (c *counting) Embed(ctx context.Context, texts []engine.Text, call engine.Call) ([]engine.Embedding, engine.CallReport, error) {
	embs, rep, err := c.Embedder.Embed(ctx, texts, call)
	c.mu.Lock()
	c.tokens += rep.Tokens
	c.padded += rep.PaddedTokens
	c.mu.Unlock()
	return embs, rep, err
}

func (c *counting) totals() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tokens, c.padded
}
