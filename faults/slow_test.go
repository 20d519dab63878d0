package faults

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/fakes"
	"github.com/jetembed/jetembed/engine/ort/enginetest"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
)

// The slow-consumer test runs the consumer in process, like serve wires it,
// because it needs an engine slower than AckWait and a way to switch the
// InProgress heartbeats off for its control run.

// openTiny opens the tiny model on one CPU session.
func openTiny(t testing.TB) *engine.Engine {
	t.Helper()
	return enginetest.Open(t, engine.Config{})
}

// silent drops InProgress heartbeats, for the control run.
type silent struct{ consumer.Message }

func (silent) InProgress() error { return nil }

// deliveryLog records the highest delivery count seen per job id.
type deliveryLog struct {
	mu  sync.Mutex
	max map[string]uint64
}

func (l *deliveryLog) maxDelivered() (worst uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range l.max {
		worst = max(worst, n)
	}
	return worst
}

// runSlow queues jobs and runs a consumer whose work takes 2.5 x AckWait;
// heartbeats says whether InProgress reaches the server. It returns the
// highest delivery count any job saw and the run's bulk for verification.
func runSlow(t *testing.T, heartbeats bool) (uint64, *bulk) {
	srv := natstest.RunServer(t)
	const ackWait = 2 * time.Second
	cfg := faultConfig(1, ackWait)
	b := newBulk(t, srv.ClientURL(), cfg, "slow")
	b.submit(40)

	e := openTiny(t)
	log := &deliveryLog{max: map[string]uint64{}}
	sink := func(cons *consumer.Loop) jetstream.Sink {
		return sinkFunc(func(ctx context.Context, d consumer.Delivery) error {
			// Every job has a subject of its own.
			if id := d.Subject; id != "" {
				log.mu.Lock()
				log.max[id] = max(log.max[id], d.NumDelivered)
				log.mu.Unlock()
			}
			if !heartbeats {
				d.Msg = silent{d.Msg}
			}
			return cons.Submit(ctx, d)
		})
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	w, err := jetstream.StartWorker(context.Background(), b.nc, jetstream.WorkerConfig{
		Config: cfg, Consumer: consumer.Config{}, Embedder: &fakes.Embedder{Embedder: e, Delay: 5 * ackWait / 2}, // work longer than AckWait
		Sink: sink, Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	}()
	start := time.Now()
	b.waitResults(len(b.ids), 60*time.Second)
	t.Logf("heartbeats %v: %d jobs done in %v with AckWait %v and %v per batch; most deliveries of one job: %d",
		heartbeats, len(b.ids), time.Since(start).Round(time.Millisecond), ackWait, 5*ackWait/2, log.maxDelivered())
	return log.maxDelivered(), b
}

// TestSlowWorkKeptByInProgress: with work 2.5x longer than AckWait, the
// consumer's InProgress heartbeats keep every job from being redelivered
// while it is worked on. The control run without heartbeats shows that the
// same set-up does redeliver, so the first run proves something.
func TestSlowWorkKeptByInProgress(t *testing.T) {
	worst, b := runSlow(t, true)
	if worst != 1 {
		t.Errorf("a job was delivered %d times although the consumer worked on it", worst)
	}
	b.verify()
	if info, err := b.consumerInfo(); err == nil && info.Delivered.Consumer != uint64(len(b.ids)) {
		t.Errorf("%d deliveries for %d jobs", info.Delivered.Consumer, len(b.ids))
	}

	t.Run("control without InProgress", func(t *testing.T) {
		worst, b := runSlow(t, false)
		if worst < 2 {
			t.Errorf("without heartbeats no job was redelivered (most deliveries %d): the test cannot see a redelivery", worst)
		}
		// Results stay exactly once even when jobs run twice.
		b.verify()
	})
}

// sinkFunc turns a function into a jetstream.Sink.
type sinkFunc func(ctx context.Context, d consumer.Delivery) error

func (f sinkFunc) Submit(ctx context.Context, d consumer.Delivery) error { return f(ctx, d) }
