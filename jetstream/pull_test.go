package jetstream_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
)

// ackSink acknowledges each delivery after delay and reports its totals as
// a busy consumer would.
type ackSink struct {
	delay     time.Duration
	jobs      atomic.Uint64 // deliveries
	mu        sync.Mutex
	delivered map[uint64]int // NumDelivered -> count
	seen      map[string]bool
	badTimes  int // deliveries without a store time before receipt
}

// unique counts the distinct jobs delivered.
func (s *ackSink) unique() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

func (s *ackSink) Submit(ctx context.Context, d consumer.Delivery) error {
	s.mu.Lock()
	if s.delivered == nil {
		s.delivered, s.seen = map[uint64]int{}, map[string]bool{}
	}
	s.delivered[d.NumDelivered]++
	s.seen[string(d.Data)] = true
	if d.Stored.IsZero() || d.Stored.After(d.Received) || d.Msg == nil || len(d.Data) == 0 {
		s.badTimes++
	}
	s.mu.Unlock()
	if s.delay > 0 {
		time.Sleep(s.delay)
	}
	s.jobs.Add(1)
	return d.Msg.Ack()
}

func (s *ackSink) Stats() consumer.Stats {
	n := s.jobs.Load()
	return consumer.Stats{Jobs: n, Texts: 2 * n, Held: 1}
}

func queueJobs(t *testing.T, srv *server, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var futures []natsjs.PubAckFuture
	for i := range n {
		f, err := srv.js.PublishAsync("embed.jobs.pull", fmt.Appendf(nil, "job %d", i))
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	select {
	case <-srv.js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("async publishes not acknowledged")
	}
	for _, f := range futures {
		select {
		case err := <-f.Err():
			t.Fatal(err)
		default:
		}
	}
}

func jobsConsumer(t *testing.T, srv *server) natsjs.Consumer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := srv.js.Consumer(ctx, srv.cfg.Jobs.Name, srv.cfg.Consumer.Name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestPullPrefetchGrowsWithThroughput(t *testing.T) {
	srv := newServer(t, nil)
	queueJobs(t, srv, 3000)
	sink := &ackSink{}
	loop, err := jetstream.Pull(context.Background(), jobsConsumer(t, srv), sink,
		jetstream.PrefetchLimits(4, 256), jetstream.PullAckWait(4*time.Second),
		jetstream.PullMeasureEvery(20*time.Millisecond), jetstream.PullLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer loop.Stop()
	if got := loop.Prefetch(); got != 4 {
		t.Errorf("prefetch starts at %d, want the minimum 4", got)
	}
	natstest.CheckFor(t, 20*time.Second, 5*time.Millisecond, func() error {
		if p := loop.Prefetch(); p < 64 {
			return fmt.Errorf("prefetch %d after %d jobs", p, sink.jobs.Load())
		}
		return nil
	})
	// A resize only changes how much the next pull request asks for: no
	// request is abandoned, so every job comes exactly once.
	natstest.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if n := sink.unique(); n != 3000 {
			return fmt.Errorf("%d of 3000 jobs", n)
		}
		return nil
	})
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if again := int(sink.jobs.Load()) - 3000; again != 0 {
		t.Errorf("deliveries by count %v: resizing redelivered %d jobs", sink.delivered, again)
	}
	if sink.badTimes != 0 {
		t.Errorf("%d deliveries without message, data, or a store time before their receipt", sink.badTimes)
	}
}

func TestPullPrefetchStaysWithinAckWait(t *testing.T) {
	srv := newServer(t, func(c *jetstream.Config) { c.Consumer.AckWait = time.Second })
	queueJobs(t, srv, 200)
	// 5ms a job: about 200 jobs/s, so a quarter of the 1s AckWait is about
	// 50 buffered jobs.
	sink := &ackSink{delay: 5 * time.Millisecond}
	loop, err := jetstream.Pull(context.Background(), jobsConsumer(t, srv), sink,
		jetstream.PrefetchLimits(2, 1000), jetstream.PullMeasureEvery(50*time.Millisecond), jetstream.PullLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer loop.Stop()
	peak := 0
	natstest.CheckFor(t, 20*time.Second, 5*time.Millisecond, func() error {
		peak = max(peak, loop.Prefetch())
		if n := sink.unique(); n != 200 {
			return fmt.Errorf("%d of 200 jobs", n)
		}
		return nil
	})
	if peak > 125 {
		t.Errorf("prefetch reached %d at about 200 jobs/s: more than the process finishes within AckWait/4", peak)
	}
	if peak <= 2 {
		t.Errorf("prefetch never grew from its minimum (peak %d)", peak)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	// A buffer sized past AckWait would see dozens come back.
	if again := sink.delivered[2] + sink.delivered[3]; again != 0 {
		t.Errorf("deliveries by count %v: buffered jobs outlived AckWait", sink.delivered)
	}
}

// blockSink takes one delivery and then blocks every Submit until ctx ends,
// NAKing what it refuses, as a full consumer does.
type blockSink struct {
	took    atomic.Int32
	entered chan struct{}
	once    sync.Once
}

func (s *blockSink) Submit(ctx context.Context, d consumer.Delivery) error {
	if s.took.Add(1) == 1 {
		return d.Msg.Ack()
	}
	s.once.Do(func() { close(s.entered) })
	<-ctx.Done()
	_ = d.Msg.Nak()
	return ctx.Err()
}

func TestPullStopGivesBackBufferedMessages(t *testing.T) {
	srv := newServer(t, nil)
	queueJobs(t, srv, 20)
	sink := &blockSink{entered: make(chan struct{})}
	c := jobsConsumer(t, srv)
	loop, err := jetstream.Pull(context.Background(), c, sink, jetstream.PrefetchLimits(8, 8), jetstream.PullLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-sink.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the loop never submitted a second job")
	}
	// The server pushed the prefetch ahead of the blocked Submit.
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		info := consumerInfo(t, srv)
		if info.NumAckPending < 5 {
			return fmt.Errorf("%d ack pending", info.NumAckPending)
		}
		return nil
	})
	loop.Stop()
	select {
	case <-loop.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("loop not closed after Stop")
	}
	// Everything but the one ACKed job is available again: the NAKed ones
	// at once, a job the server routed to the closed inbox after the 5s
	// AckWait. None is lost.
	start := time.Now()
	b, err := c.Fetch(19, natsjs.FetchMaxWait(8*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range b.Messages() {
		n++
		_ = m.Ack()
	}
	if n != 19 {
		t.Errorf("%d of 19 jobs fetchable after Stop", n)
	}
	t.Logf("given back in %v", time.Since(start).Round(time.Millisecond))
}

// gateSink acknowledges deliveries, but holds the second one until open is
// closed.
type gateSink struct {
	n       atomic.Int32
	entered chan struct{}
	open    chan struct{}
}

func (s *gateSink) Submit(ctx context.Context, d consumer.Delivery) error {
	if s.n.Add(1) == 2 {
		close(s.entered)
		<-s.open
	}
	return d.Msg.Ack()
}

func TestPullDrainHandsOverBufferedMessages(t *testing.T) {
	srv := newServer(t, nil)
	queueJobs(t, srv, 20)
	sink := &gateSink{entered: make(chan struct{}), open: make(chan struct{})}
	loop, err := jetstream.Pull(context.Background(), jobsConsumer(t, srv), sink, jetstream.PrefetchLimits(8, 8), jetstream.PullLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	<-sink.entered
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if info := consumerInfo(t, srv); info.NumAckPending < 5 {
			return fmt.Errorf("%d ack pending", info.NumAckPending)
		}
		return nil
	})
	loop.Drain()
	close(sink.open)
	select {
	case <-loop.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("loop not closed after Drain")
	}
	got := int(sink.n.Load())
	if got < 6 || got == 20 {
		t.Errorf("sink got %d jobs: want the buffered ones, and no pulling after Drain", got)
	}
	// The rest is still queued, or (routed to the inbox after it closed)
	// comes back after AckWait: nothing is lost. The sink's ACKs are plain
	// publishes, so the server may count them a moment after the loop
	// closed: wait for them to land.
	natstest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		info := consumerInfo(t, srv)
		if int(info.NumPending)+info.NumAckPending != 20-got || info.NumAckPending > 4 {
			return fmt.Errorf("after Drain: %d ack pending, %d pending; the sink took %d of 20", info.NumAckPending, info.NumPending, got)
		}
		return nil
	})
}

// TestPullSmallPrefetchDoesNotStall pulls 3000 jobs four at a time. nats.go
// asks for the next batch only at the top of Next, and not while its last
// request is still being sent; on a loaded host (or under -race) the server
// answers before the sender is done, and a Next that blocks for good would
// wait 30s for the missed-heartbeat timeout. No silence may come near that.
func TestPullSmallPrefetchDoesNotStall(t *testing.T) {
	srv := newServer(t, nil)
	queueJobs(t, srv, 3000)
	sink := &ackSink{}
	loop, err := jetstream.Pull(context.Background(), jobsConsumer(t, srv), sink,
		jetstream.PrefetchLimits(4, 4), jetstream.PullLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer loop.Stop()
	last, lastAt := uint64(0), time.Now()
	natstest.CheckFor(t, 60*time.Second, 20*time.Millisecond, func() error {
		if n := sink.jobs.Load(); n != last {
			last, lastAt = n, time.Now()
		}
		if quiet := time.Since(lastAt); quiet > 10*time.Second {
			t.Fatalf("no delivery for %v after %d jobs: the iterator stalled", quiet, last)
		}
		if n := sink.unique(); n != 3000 {
			return fmt.Errorf("%d of 3000 jobs", n)
		}
		return nil
	})
}
