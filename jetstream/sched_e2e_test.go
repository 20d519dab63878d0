package jetstream_test

import (
	"context"
	"fmt"
	"iter"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/fakes"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/schema"
)

// openGatedEngine is openEngine over gated sessions: real ONNX Runtime
// sessions whose runs of minSeq tokens or more each wait for a token from
// gate, so the test decides when long (bulk) chunks finish and "waits
// behind" is counted in runs, not time. The gate opens for good when
// openAll is called, or the test ends; runs counts the sessions' runs
// begun.
func openGatedEngine(t *testing.T, cfg engine.Config, gate <-chan struct{}, minSeq int) (e *engine.Engine, openAll func(), runs *atomic.Int64) {
	t.Helper()
	open := make(chan struct{})
	openAll = sync.OnceFunc(func() { close(open) })
	runs = new(atomic.Int64)
	e = openEngineWith(t, cfg, func(r engine.Runner) engine.Runner {
		return &fakes.Runner{Runner: r, Gate: gate, Open: open, MinSeq: minSeq, Runs: runs}
	})
	// Registered after the engine's Close, so it runs first: no run stays
	// blocked while Close waits for the sessions.
	t.Cleanup(openAll)
	return e, openAll, runs
}

// bulkText has well over 64 tokens of the tiny model's tokenizer.
func bulkText(i int) string {
	return fmt.Sprintf("bulk text %d ", i) + strings.Repeat("lorem ipsum dolor sit amet ", 12)
}

// TestRequestUnderBacklog: with a bulk backlog queued in the engine and
// the consumer's bulk budget full, a request is admitted (never answered
// overloaded) and runs after at most about one bulk chunk per session,
// while most of the backlog is still waiting.
func TestRequestUnderBacklog(t *testing.T) {
	srv := newServer(t, nil)
	gate := make(chan struct{})
	e, openAll, runs := openGatedEngine(t, engine.Config{Sessions: 2, MaxBatch: 2}, gate, 64)
	const n = 12
	c, err := client.New(srv.nc, client.WithRun("backlog"))
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i := range ids {
		j := schema.NewJob(fmt.Sprintf("bulk%02d", i), bulkText(2*i), bulkText(2*i+1))
		if _, err := c.Submit(context.Background(), j); err != nil {
			t.Fatal(err)
		}
		ids[i] = j.ID
	}
	// The bulk budget holds about the whole backlog and no more.
	w := startWorker(t, srv, e, workerOptions{cfg: consumer.Config{InFlightTokens: 2000}})
	natstest.CheckFor(t, 20*time.Second, 10*time.Millisecond, func() error {
		if st := w.cons.Stats(); st.Held < n/2 || st.Queued != 0 {
			return fmt.Errorf("%d jobs held, %d queued in the consumer", st.Held, st.Queued)
		}
		return nil
	})
	cli, err := client.New(srv.nc)
	if err != nil {
		t.Fatal(err)
	}
	answered := make(chan *schema.Result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		res, err := cli.Embed(ctx, "a request under the backlog")
		if err != nil && res == nil {
			t.Errorf("request: %v", err)
		}
		answered <- res
	}()
	natstest.CheckFor(t, 20*time.Second, time.Millisecond, func() error {
		if q := e.Stats().QueuedInteractive; q != 1 {
			return fmt.Errorf("%d interactive texts queued", q)
		}
		return nil
	})
	// Let bulk chunks finish one at a time until a session took the
	// request. Both sessions hold a gated bulk chunk when it arrives: it
	// waits for one of them, never for the backlog queued behind.
	released := 0
	for e.Stats().QueuedInteractive > 0 && released < 4*n {
		begun := runs.Load()
		gate <- struct{}{}
		released++
		// The released session ends its chunk and begins its next run: the
		// request's, or a bulk chunk the request waits behind.
		natstest.CheckFor(t, 20*time.Second, time.Millisecond, func() error {
			if e.Stats().QueuedInteractive == 0 || runs.Load() > begun {
				return nil
			}
			return fmt.Errorf("released %d chunks: no run begun since", released)
		})
	}
	if released > 1 {
		t.Errorf("the request waited for %d bulk chunks to finish, want one", released)
	}
	res := <-answered
	if res == nil || res.Error != nil {
		t.Fatalf("request answered %+v under a bulk backlog, want vectors", res)
	}
	if q := e.Stats().Queued; q == 0 {
		t.Errorf("no bulk text left queued when the request was answered: the test built no backlog")
	}
	openAll()
	got := collect(t, c, "backlog", ids)
	for i, id := range ids {
		checkResult(t, e, got[id], []string{bulkText(2 * i), bulkText(2*i + 1)}, nil)
	}
}

// TestJobSettlesAlone: a small job is settled (its result stored) while a
// job fetched with it still has a text running: no job waits for the
// rest of a fetched batch.
func TestJobSettlesAlone(t *testing.T) {
	srv := newServer(t, nil)
	gate := make(chan struct{})
	// One text a run: no short text shares the gated long one's chunk.
	e, openAll, _ := openGatedEngine(t, engine.Config{Sessions: 2, MaxBatch: 1}, gate, 64)
	c, err := client.New(srv.nc, client.WithRun("alone"))
	if err != nil {
		t.Fatal(err)
	}
	big := schema.NewJob("big", bulkText(0), "short one", "short two")
	small := schema.NewJob("small", "a small job")
	for _, j := range []*schema.Job{big, small} {
		if _, err := c.Submit(context.Background(), j); err != nil {
			t.Fatal(err)
		}
	}
	startWorker(t, srv, e, workerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pull, stop := iter.Pull2(c.Results(ctx, "alone"))
	defer stop()
	next := func() (client.StoredResult, error) {
		sr, err, ok := pull()
		if !ok && err == nil {
			err = fmt.Errorf("results ended")
		}
		return sr, err
	}
	first, err := next()
	if err != nil {
		t.Fatalf("first result: %v (the small job waited for the big one's gated text)", err)
	}
	if first.ID != "small" {
		t.Fatalf("first result is job %s, want the small job while the big one's long text is held", first.ID)
	}
	openAll()
	second, err := next()
	if err != nil || second.ID != "big" {
		t.Fatalf("second result %v, %v; want the big job once its text ran", second, err)
	}
	checkResult(t, e, first.Result, small.Texts, nil)
	checkResult(t, e, second.Result, big.Texts, nil)
}
