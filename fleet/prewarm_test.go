package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetembed/jetembed/fleet"
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
	// b's watcher has the key (so its worker would pre-warm it), then its
	// worker looks six times.
	natstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if mb.Stats().Shapes < 1 {
			return fmt.Errorf("b has not seen the shape: %+v", mb.Stats())
		}
		return nil
	})
	waitPasses(t, mb, func(st fleet.Stats) int64 { return st.Ticks }, 6)
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

// TestFleetPrewarmRespectsMemoryBudget: a peer's shape over this engine's
// memory budget is ignored (never warmed: its workspace would not fit),
// while one within it is pre-warmed.
func TestFleetPrewarmRespectsMemoryBudget(t *testing.T) {
	srv := newServer(t, nil)
	a := openEngine(t, guardedConfig())
	cfg := guardedConfig()
	cfg.MemoryBudget = 16 << 20
	b := newCounting(openEngine(t, cfg))
	if err := b.ShapeAdmissible(4, 256); err == nil || !strings.Contains(err.Error(), "memory budget") {
		t.Fatalf("precondition: 4x256 under a 16 MiB budget: %v; want over the memory budget", err)
	}
	model := a.ModelID()
	startMember(t, srv, a, model, "a", nil)
	mb := startMember(t, srv, b, model, "b", nil)
	for _, sh := range [][2]int{{4, 256}, {2, 128}} {
		if err := a.WarmShape(context.Background(), sh[0], sh[1]); err != nil {
			t.Fatal(err)
		}
	}
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if !b.ShapeWarmed(2, 128) || mb.Stats().Ignored == 0 {
			return errNotYet
		}
		return nil
	})
	if n := b.warmed(4, 256); n != 0 || b.ShapeWarmed(4, 256) {
		t.Errorf("b warmed 4x256 (%d runs) over its memory budget", n)
	}
}
