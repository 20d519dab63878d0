package fleet_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetembed/jetembed/internal/natstest"
)

// queuedEngine reports work queued while queued is set.
type queuedEngine struct {
	*countingEngine
	queued atomic.Bool
}

func (q *queuedEngine) Activity() (bool, int64) {
	busy, runs := q.countingEngine.Activity()
	return busy || q.queued.Load(), runs
}

// TestFleetPrewarmWaitsForQueuedWork: a peer's shape is not pre-warmed
// while the engine has work queued (a pre-warm takes every session for a
// run); it is once the queue empties.
func TestFleetPrewarmWaitsForQueuedWork(t *testing.T) {
	srv := newServer(t, nil)
	a := openEngine(t, guardedConfig())
	b := &queuedEngine{countingEngine: newCounting(openEngine(t, guardedConfig()))}
	b.queued.Store(true)
	model := a.ModelID()
	startMember(t, srv, a, model, "a", nil)
	mb := startMember(t, srv, b, model, "b", nil)

	if err := a.WarmShape(context.Background(), 2, 128); err != nil {
		t.Fatal(err)
	}
	kv := bucket(t, srv)
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		_, err := kv.Get(context.Background(), shapeKey(model, 2, 128).String())
		return err
	})
	time.Sleep(300 * time.Millisecond) // six ticks of b's worker
	if n := b.warmed(2, 128); n != 0 || mb.Stats().Prewarms != 0 {
		t.Fatalf("b pre-warmed 2x128 (%d runs) with work queued", n)
	}
	b.queued.Store(false)
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if mb.Stats().Prewarms != 1 || !b.ShapeWarmed(2, 128) {
			return errNotYet
		}
		return nil
	})
}

var errNotYet = errors.New("not yet")
