package fleet_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/fleet"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// keyLog records when keys first appeared in the engines bucket.
type keyLog struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

func watchKeys(t *testing.T, srv *server) *keyLog {
	t.Helper()
	w, err := bucket(t, srv).WatchAll(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	l := &keyLog{seen: map[string]time.Time{}}
	go func() {
		for e := range w.Updates() {
			if e == nil {
				continue
			}
			l.mu.Lock()
			if _, ok := l.seen[e.Key()]; !ok {
				l.seen[e.Key()] = time.Now()
			}
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() { _ = w.Stop() })
	return l
}

func (l *keyLog) at(key string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen[key]
}

func (l *keyLog) first(prefix string) (string, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, at := range l.seen {
		if strings.HasPrefix(k, prefix) {
			return k, at
		}
	}
	return "", time.Time{}
}

// TestFleetHealsRefusedJob runs the whole loop: a job too long for the
// warmed shapes is refused by the serving member's JIT guard and NAKed, the
// refusal becomes a want key, the idle member compiles the shape under the
// lock, the serving member pre-warms it, and a later delivery succeeds.
// The final shape_not_warmed result and dead letter after MaxDeliver are
// covered by TestMaxDeliverGivesFinalErrorAndDeadLetter.
func TestFleetHealsRefusedJob(t *testing.T) {
	srv := newServer(t, func(c *jetstream.Config) { c.Consumer.MaxDeliver = 20 })
	serving := openEngine(t, guardedConfig())
	idle := openEngine(t, guardedConfig())
	model := serving.ModelID()
	// The serving member reports a backlog (Busy), as serve does from the
	// jobs consumer's pending count, so it never counts as idle: the idle
	// peer must build the shape for it.
	fs := startMember(t, srv, serving, model, "serving", func(c *fleet.Config) {
		c.IdleQuiet = 300 * time.Millisecond
		c.Busy = func() bool { return true }
	})
	fi := startMember(t, srv, idle, model, "idle", func(c *fleet.Config) { c.IdleQuiet = 300 * time.Millisecond })
	keys := watchKeys(t, srv)

	var seen deliveries
	startWorker(t, srv, fleet.Wrap(serving, fs),
		consumer.Config{NakBackoff: consumer.Backoff{Base: 200 * time.Millisecond, Max: 400 * time.Millisecond, Jitter: -1}},
		seen.wrap)
	c, err := client.New(srv.NC, client.WithRun("heal"))
	if err != nil {
		t.Fatal(err)
	}
	submitted := time.Now()
	if _, err := c.Submit(context.Background(), schema.NewJob("long", hundredTokens)); err != nil {
		t.Fatal(err)
	}
	res := result(t, c, "heal", "long")
	done := time.Since(submitted)
	if res.Error != nil || len(res.Items) != 1 || res.Items[0].Error != nil || len(res.Items[0].Dense) == 0 {
		t.Fatalf("result %+v; want one dense vector", res)
	}

	want, wantAt := keys.first("want." + fleet.KeyToken(model) + ".cpu.")
	shape := strings.TrimPrefix(want, "want.")
	shapeAt := keys.at(shape)
	delivered := seen.of("long")
	t.Logf("job delivered %d times; want %s after %v, shape compiled after %v, result after %v",
		delivered, want, wantAt.Sub(submitted), shapeAt.Sub(submitted), done)
	switch {
	case want == "":
		t.Fatal("no want key appeared for the refused job")
	case shapeAt.IsZero() || shapeAt.Before(wantAt):
		t.Errorf("shape key %s at %v, want it after the want key (%v)", shape, shapeAt, wantAt)
	case delivered < 2:
		t.Errorf("job delivered %d times; want a refusal (NAK) before the success", delivered)
	}
	if st, sti := fs.Stats(), fi.Stats(); st.Compiles != 0 || sti.Compiles != 1 || st.Prewarms != 1 {
		t.Errorf("serving %+v, idle %+v; want one compile by the idle member, pre-warmed by the serving one", st, sti)
	}
	// Refusals are not session errors: the breaker saw none.
	for _, s := range serving.Stats().Sessions {
		if s.Errors != 0 || s.ConsecutiveErrors != 0 || s.Reloads != 0 || !s.Loaded {
			t.Errorf("session %d after the refusals: %+v; want no errors, no reload", s.Index, s)
		}
	}
	if dlq, err := srv.JS.Stream(context.Background(), srv.Config.DLQ.Name); err != nil {
		t.Fatal(err)
	} else if n := dlq.CachedInfo().State.Msgs; n != 0 {
		t.Errorf("%d dead letters for a job that was healed", n)
	}
	// The satisfied want is dropped.
	natstest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		if st := fs.Stats(); st.Wants != 0 {
			return fmt.Errorf("serving member still sees %d wants", st.Wants)
		}
		return nil
	})
}

func TestFleetHourlyCap(t *testing.T) {
	srv := newServer(t, nil)
	e := openEngine(t, guardedConfig())
	member := startMember(t, srv, e, e.ModelID(), "capped", func(c *fleet.Config) {
		c.IdleQuiet = 100 * time.Millisecond
		c.CompilesPerHour = 1
	})
	member.Want(1, 128)
	member.Want(1, 256)
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if st := member.Stats(); st.Compiles != 1 {
			return fmt.Errorf("stats %+v, want one compile", st)
		}
		return nil
	})
	// The longest wanted shape goes first: it raises the ceiling most.
	if !e.ShapeWarmed(1, 256) || e.ShapeWarmed(1, 128) {
		t.Errorf("warmed 1x256 %v, 1x128 %v; want the longer one compiled first", e.ShapeWarmed(1, 256), e.ShapeWarmed(1, 128))
	}
	waitPasses(t, member, func(st fleet.Stats) int64 { return st.IdleChecks }, 5) // idle ticks that could compile 1x128
	if st := member.Stats(); st.Compiles != 1 || st.Wants != 1 {
		t.Errorf("after more idle ticks: %+v; want the cap to hold the second compile and its want", st)
	}
	if _, err := bucket(t, srv).Get(context.Background(), shapeKey(e.ModelID(), 1, 128).Want()); err != nil {
		t.Errorf("want of 1x128: %v; want it pending", err)
	}
}

// TestFleetUnbuildableWant: a shape a peer with a larger token limit wants
// is one this member would never run: it ignores the want (no build is
// tried, nothing counts against its hourly cap) and leaves the key to the
// peers that can build it.
func TestFleetUnbuildableWant(t *testing.T) {
	srv := newServer(t, nil)
	e := openEngine(t, guardedConfig()) // max tokens 512
	m := startMember(t, srv, e, e.ModelID(), "small", func(c *fleet.Config) {
		c.IdleQuiet = 100 * time.Millisecond
		c.CompilesPerHour = 3
	})
	kv := bucket(t, srv)
	big := shapeKey(e.ModelID(), 1, 1024).Want()
	if _, err := kv.Create(context.Background(), big, []byte(`{"by":"big-peer"}`)); err != nil {
		t.Fatal(err)
	}
	m.Want(1, 1024) // its own guard never refuses such a shape; if it did, no want
	m.Want(1, 128)
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if !e.ShapeWarmed(1, 128) {
			return fmt.Errorf("1x128 not built; %+v", m.Stats())
		}
		return nil
	})
	waitPasses(t, m, func(st fleet.Stats) int64 { return st.IdleChecks }, 5) // idle ticks that could try 1x1024
	if st := m.Stats(); st.Errors != 0 || st.Compiles != 1 || st.Wants != 0 || st.Ignored != 1 {
		t.Errorf("stats %+v; want 1x1024 ignored, never built; one compile of 1x128", st)
	}
	if _, err := kv.Get(context.Background(), big); err != nil {
		t.Errorf("the peer's want of 1x1024: %v; want it left in the bucket", err)
	}
}
