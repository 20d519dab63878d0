package jetstream

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/internal/natstest"
)

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestPullReopensAfterSilence: since Next is woken often, the iterator's
// own missed-heartbeat check never fires; the loop reopens the iterator
// after a silence instead, and still delivers afterwards.
func TestPullReopensAfterSilence(t *testing.T) {
	srv := natstest.RunServer(t)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := DefaultConfig()
	cfg.Consumer.BackOff = nil
	if _, err := Provision(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, cfg.Jobs.Name, cfg.Consumer.Name)
	if err != nil {
		t.Fatal(err)
	}
	var log lockedBuf
	got := make(chan consumer.Delivery, 1)
	sink := sinkOf(func(_ context.Context, d consumer.Delivery) error {
		got <- d
		return d.Msg.Ack()
	})
	loop, err := Pull(context.Background(), cons, sink,
		PullLogger(slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))),
		func(o *pullOptions) { o.wake, o.idleReopen = 50*time.Millisecond, 300*time.Millisecond })
	if err != nil {
		t.Fatal(err)
	}
	defer loop.Stop()
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := strings.Count(log.String(), "reopening the iterator"); n < 2 {
			return fmt.Errorf("%d reopens", n)
		}
		return nil
	})
	if _, err := js.Publish(ctx, "embed.jobs.idle", []byte("after the silence")); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-got:
		if string(d.Data) != "after the silence" {
			t.Errorf("delivered %q", d.Data)
		}
	case <-ctx.Done():
		t.Fatal("no delivery after the iterator was reopened")
	}
}

type sinkOf func(context.Context, consumer.Delivery) error

func (f sinkOf) Submit(ctx context.Context, d consumer.Delivery) error { return f(ctx, d) }
