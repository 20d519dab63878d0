package jetstream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
)

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
