package jetstream_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// guardedEngine refuses every text over 16 tokens with shape_not_warmed
// until its ceiling is raised, like a TensorRT consumer whose fleet has
// not compiled the shape yet.
func guardedEngine(t *testing.T) *engine.Engine {
	return openEngine(t, engine.Config{Guard: true, GuardSeq: 16})
}

var longText = strings.Repeat("a long text needs a long shape ", 6)

func TestRetriableRefusalIsNakedThenSucceeds(t *testing.T) {
	srv := newServer(t, nil)
	e := guardedEngine(t)
	var seen deliveries
	startWorker(t, srv, e, workerOptions{
		cfg:  consumer.Config{NakBackoff: consumer.Backoff{Base: 100 * time.Millisecond, Max: 200 * time.Millisecond, Jitter: -1}},
		sink: seen.wrap,
	})
	c, err := client.New(srv.nc, client.WithRun("guard"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(context.Background(), schema.NewJob("long", longText)); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := seen.of("long"); n < 3 {
			return fmt.Errorf("delivered %d times, want NAKs and redeliveries", n)
		}
		return nil
	})
	if n := natstest.StreamCount(t, srv.js, srv.cfg.Results.Name); n != 0 {
		t.Fatalf("%d results published while the shape was refused", n)
	}
	// The fleet compiled the shape: the next delivery runs.
	e.Coverage().Raise(1, 512)
	got := collect(t, c, "guard", []string{"long"})
	checkResult(t, e, got["long"], []string{longText}, nil)
	if n := natstest.StreamCount(t, srv.js, srv.cfg.DLQ.Name); n != 0 {
		t.Errorf("%d dead letters for a job that succeeded", n)
	}
}

func TestMaxDeliverGivesFinalErrorAndDeadLetter(t *testing.T) {
	srv := newServer(t, func(c *jetstream.Config) { c.Consumer.MaxDeliver = 3 })
	e := guardedEngine(t)
	startWorker(t, srv, e, workerOptions{
		cfg: consumer.Config{NakBackoff: consumer.Backoff{Base: 50 * time.Millisecond, Max: 50 * time.Millisecond, Jitter: -1}},
	})
	c, err := client.New(srv.nc, client.WithRun("maxdeliver"))
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range []*schema.Job{schema.NewJob("never", longText), schema.NewJob("short", "short")} {
		if _, err := c.Submit(context.Background(), j); err != nil {
			t.Fatal(err)
		}
	}
	got := collect(t, c, "maxdeliver", []string{"never", "short"})
	checkResult(t, e, got["short"], []string{"short"}, nil)
	if r := got["never"]; r.Error == nil || r.Error.Code != schema.CodeShapeNotWarmed || !r.Error.Retriable || len(r.Items) != 0 {
		t.Fatalf("final result %+v, want a retriable shape_not_warmed job error", r)
	}
	natstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if n := natstest.StreamCount(t, srv.js, srv.cfg.DLQ.Name); n != 1 {
			return fmt.Errorf("%d dead letters, want 1", n)
		}
		return nil
	})
	m := natstest.StreamMsgs(t, srv.js, srv.cfg.DLQ.Name, "")[0]
	if h := m.Headers(); h.Get(jetstream.HeaderDLQCode) != string(schema.CodeShapeNotWarmed) || h.Get(jetstream.HeaderDLQDelivered) != "3" || h.Get(jetstream.HeaderDLQJobID) != "never" {
		t.Errorf("dead letter headers %v", h)
	}
	natstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if info := consumerInfo(t, srv); info.NumAckPending != 0 || info.NumPending != 0 {
			return fmt.Errorf("consumer: %d ack pending, %d pending", info.NumAckPending, info.NumPending)
		}
		return nil
	})
}

// nakSink NAKs every delivery with a fixed delay and records when each
// delivery arrived.
type nakSink struct {
	delay time.Duration
	mu    sync.Mutex
	at    []time.Time
}

func (s *nakSink) Submit(_ context.Context, d consumer.Delivery) error {
	s.mu.Lock()
	s.at = append(s.at, d.Received)
	s.mu.Unlock()
	return d.Msg.NakWithDelay(s.delay)
}

func TestNakDelayIsExactWithBackOff(t *testing.T) {
	for _, conn := range []bool{true, false} {
		t.Run(fmt.Sprint("conn=", conn), func(t *testing.T) {
			// The default shape of the consumer: a backoff doubling from
			// AckWait, here 1s, 4s, 16s.
			srv := newServer(t, func(c *jetstream.Config) {
				c.Consumer.AckWait, c.Consumer.MaxDeliver = time.Second, 6
				c.Consumer.BackOff = []time.Duration{time.Second, 4 * time.Second, 16 * time.Second}
			})
			publishRaw(t, srv.js, "embed.jobs.nak", nil, []byte("job"))
			sink := &nakSink{delay: 300 * time.Millisecond}
			opts := []jetstream.PullOption{jetstream.PullLogger(testLogger(t))}
			if conn {
				opts = append(opts, jetstream.PullConn(srv.nc))
			}
			loop, err := jetstream.Pull(context.Background(), jobsConsumer(t, srv), sink, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer loop.Stop()
			if !conn {
				// What nats-server does without the correction: the third
				// delivery waits the 4s backoff step (less AckWait), not
				// 300ms, after the second one's NAK.
				natstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
					sink.mu.Lock()
					defer sink.mu.Unlock()
					if len(sink.at) < 3 {
						return fmt.Errorf("%d deliveries", len(sink.at))
					}
					return nil
				})
				sink.mu.Lock()
				defer sink.mu.Unlock()
				if gap := sink.at[2].Sub(sink.at[1]); gap < 2500*time.Millisecond {
					t.Errorf("third delivery %v after the second; the server no longer adds the backoff to NAK delays?", gap)
				}
				return
			}
			natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
				sink.mu.Lock()
				defer sink.mu.Unlock()
				if len(sink.at) < 5 {
					return fmt.Errorf("%d deliveries", len(sink.at))
				}
				return nil
			})
			sink.mu.Lock()
			defer sink.mu.Unlock()
			for i := 1; i < len(sink.at); i++ {
				// Uncorrected, deliveries 3 to 5 would come 3.3s to 15.3s
				// apart; the upper bound leaves room for a loaded machine.
				if gap := sink.at[i].Sub(sink.at[i-1]); gap < 250*time.Millisecond || gap > 2500*time.Millisecond {
					t.Errorf("delivery %d came %v after the NAK of the one before, want about 300ms", i+1, gap)
				}
			}
		})
	}
}
