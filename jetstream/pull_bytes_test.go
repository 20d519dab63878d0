package jetstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/internal/natstest"
)

// TestPullBigJobsNoSlowConsumer: jobs of 2 MB with a prefetch of 64 jobs.
// Before the fix the pull asked for 64 messages whatever their size: 128 MB
// in flight to one client, past the server's 64 MB pending limit of a
// connection on a slow reader ("Slow Consumer", a disconnect), the
// dropped jobs back after AckWait. Now a pull request carries a
// byte cap: what this process holds stays under it, every job is
// delivered once, and the connection reports no slow consumer. (On this
// loopback the client reads fast enough for the server's 64 MB pending
// limit not to trip; the bound is what keeps it so on a loaded host.)
func TestPullBigJobsNoSlowConsumer(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 80 MB")
	}
	srv := natstest.RunServer(t)
	var slow atomic.Int32
	nc, js, cons := pullRig(t, srv.ClientURL(), 5*time.Second, nil, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrSlowConsumer) {
			slow.Add(1)
		}
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const jobs, size = 40, 2 << 20
	body := make([]byte, size)
	for i := range jobs {
		copy(body, fmt.Sprintf("job %03d", i))
		if _, err := js.Publish(ctx, "embed.jobs.big", body); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]uint64{}
	var acked atomic.Int64 // acks the server has received (flushed)
	sink := sinkOf(func(_ context.Context, dl consumer.Delivery) error {
		d := dl.(*consumer.Stored)
		mu.Lock()
		seen[string(d.Data[:7])] = max(seen[string(d.Data[:7])], d.NumDelivered)
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		if err := d.Msg.Ack(); err != nil {
			return err
		}
		// The ack is asynchronous: flush so that the server has it
		// before the loop, now holding one job less, pulls again.
		if err := nc.Flush(); err != nil {
			return err
		}
		acked.Add(1)
		return nil
	})
	loop, err := Pull(context.Background(), cons, sink, PullLogger(quietLog), PullConn(nc), PrefetchLimits(64, 64))
	if err != nil {
		t.Fatal(err)
	}
	defer loop.Stop()
	// What the server handed out and this process did not acknowledge yet
	// is in it: the loop's buffer and the one job in the sink. It is
	// counted as the server's deliveries less the acks the sink flushed,
	// not as the server's NumAckPending: that also holds acks the server
	// received but its consumer has not processed yet, as many as a
	// loaded machine lets pile up (CI: 40 MB, two more than allowed). A
	// sample is kept only if no ack landed while it was taken.
	peak := 0
	natstest.CheckFor(t, 60*time.Second, 2*time.Millisecond, func() error {
		before := acked.Load()
		if info, err := cons.Info(ctx); err == nil && acked.Load() == before {
			peak = max(peak, (int(info.Delivered.Consumer)-int(before))*size)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != jobs {
			return fmt.Errorf("%d of %d jobs", len(seen), jobs)
		}
		return nil
	})
	if n := slow.Load(); n != 0 {
		t.Errorf("%d slow consumer errors", n)
	}
	mu.Lock()
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s delivered %d times", id, n)
		}
	}
	mu.Unlock()
	// The job in the sink, acknowledged but not counted yet, is one more.
	if limit := DefaultPrefetchBytes + 2*size; peak > limit {
		t.Errorf("%d MB delivered and not acknowledged, over the %d MB byte cap (+ the job in the sink)", peak>>20, DefaultPrefetchBytes>>20)
	}
	t.Logf("at most %d MB unacknowledged for a 64-job prefetch of 2 MB jobs", peak>>20)
}
