package jetstream_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// twice counts the jobs delivered more than once.
func (d *deliveries) twice() (n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.max {
		if c > 1 {
			n++
		}
	}
	return n
}

// withStats gives a wrapping sink the consumer's Stats, which the loop
// sizes its prefetch from.
type withStats struct {
	jetstream.Sink
	c *consumer.Loop
}

func (w withStats) Stats() consumer.Stats { return w.c.Stats() }

// TestLongJobsAfterShortBurst is the long-after-short workload of issue 11:
// a burst of small jobs grows the prefetch to what the process finishes in
// a quarter of AckWait at their pace, then 250 long jobs arrive and fill
// that prefetch. Before the fix they sat in the iterator's buffer, with
// nothing sending InProgress, past AckWait, and ran twice. Now buffered
// jobs are heartbeated by the loop and held ones by the consumer: no job
// is delivered twice, whatever the speed of the host.
func TestLongJobsAfterShortBurst(t *testing.T) {
	if testing.Short() {
		t.Skip("a workload of about 2000 jobs")
	}
	srv := newServer(t, func(c *jetstream.Config) { c.Consumer.AckWait = 2 * time.Second })
	e := openEngine(t, engine.Config{MaxTokens: 512})
	c, err := client.New(srv.nc, client.WithRun("flow"))
	if err != nil {
		t.Fatal(err)
	}
	// Queued ahead of the worker, so the short ones run at full speed.
	const short, long = 1500, 250
	submitJobs(t, c, short, "short-%d", "tiny %d")
	text := strings.Repeat("lorem ipsum dolor sit amet ", 60) // about 480 tokens
	for i := range long {
		j := schema.NewJob(fmt.Sprintf("long-%d", i), text, text, text)
		if _, err := c.Submit(context.Background(), j); err != nil {
			t.Fatal(err)
		}
	}
	var seen deliveries
	w := startWorker(t, srv, e, workerOptions{
		sink: func(c *consumer.Loop) jetstream.Sink { return withStats{seen.wrap(c), c} },
		pull: []jetstream.PullOption{jetstream.PullMeasureEvery(100 * time.Millisecond), jetstream.PrefetchLimits(8, 1024)},
	})
	peak := 0
	natstest.CheckFor(t, 60*time.Second, 5*time.Millisecond, func() error {
		peak = max(peak, w.w.Prefetch())
		if st := w.cons.Stats(); st.Jobs < short {
			return fmt.Errorf("%d of %d short jobs, prefetch %d", st.Jobs, short, w.w.Prefetch())
		}
		return nil
	})
	t.Logf("prefetch during the short burst: up to %d", peak)
	start := time.Now()
	natstest.CheckFor(t, 120*time.Second, 50*time.Millisecond, func() error {
		if info := consumerInfo(t, srv); info.NumPending+uint64(info.NumAckPending) > 0 {
			return fmt.Errorf("%d pending, %d ack pending", info.NumPending, info.NumAckPending)
		}
		return nil
	})
	t.Logf("%d long jobs done in %v (AckWait 2s)", long, time.Since(start).Round(time.Millisecond))
	if n := seen.twice(); n != 0 {
		t.Errorf("%d jobs delivered more than once", n)
	}
	if got := natstest.StreamCount(t, srv.js, srv.cfg.Results.Name); got != short+long {
		t.Errorf("%d results stored, want %d", got, short+long)
	}
	if n := natstest.StreamCount(t, srv.js, srv.cfg.DLQ.Name); n != 0 {
		t.Errorf("%d dead letters", n)
	}
}
