package fleet_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetembed/jetembed/fleet"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/internal/natstest"
)

// The compile lock: one builder per shape, and a dead holder's lock
// expires by its TTL.

func TestFleetCompileLockOneBuilder(t *testing.T) {
	srv := newServer(t, nil)
	var engs []*countingEngine
	var members []*fleet.Member
	for _, name := range []string{"a", "b", "c"} {
		e := newCounting(openEngine(t, guardedConfig()))
		engs = append(engs, e)
		members = append(members, startMember(t, srv, e, e.ModelID(), name, nil))
	}
	model := engs[0].ModelID()
	kv := bucket(t, srv)
	lock := shapeKey(model, 4, 256).Lock()

	// A's compile is held at the gate, with its lock taken.
	engs[0].gate = make(chan struct{})
	errs := make(chan error, 3)
	go func() { errs <- members[0].Compile(context.Background(), 4, 256) }()
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		_, err := kv.Get(context.Background(), lock)
		return err
	})
	for _, m := range members[1:] {
		go func() { errs <- m.Compile(context.Background(), 4, 256) }()
	}
	select {
	case err := <-errs:
		t.Fatalf("a Compile returned (%v) while A holds the lock", err)
	case <-time.After(300 * time.Millisecond):
	}
	if n := engs[1].warmed(4, 256) + engs[2].warmed(4, 256); n != 0 {
		t.Fatalf("B and C ran 4x256 %d times while A compiled it", n)
	}
	close(engs[0].gate)
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	compiles := 0
	for i, m := range members {
		st := m.Stats()
		compiles += int(st.Compiles)
		if !engs[i].ShapeWarmed(4, 256) || engs[i].warmed(4, 256) != 1 {
			t.Errorf("member %d: 4x256 warmed %v, %d warm-ups; want one", i, engs[i].ShapeWarmed(4, 256), engs[i].warmed(4, 256))
		}
	}
	if compiles != 1 || members[0].Stats().Compiles != 1 {
		t.Errorf("%d compiles of 4x256 (A: %d); want exactly one, by A", compiles, members[0].Stats().Compiles)
	}
	if _, err := kv.Get(context.Background(), lock); !errors.Is(err, natsjs.ErrKeyDeleted) && !errors.Is(err, natsjs.ErrKeyNotFound) {
		t.Errorf("lock after the compile: %v; want it released", err)
	}
	e, err := kv.Get(context.Background(), shapeKey(model, 4, 256).String())
	if err != nil || !strings.Contains(string(e.Value()), `"via":"lock"`) {
		t.Errorf("shape record %v, %v: want via lock", e, err)
	}
}

func TestFleetLockFreedAfterHolderDies(t *testing.T) {
	srv := newServer(t, nil)
	e := newCounting(openEngine(t, guardedConfig()))
	member := startMember(t, srv, e, e.ModelID(), "survivor", nil)

	// A holder takes the lock and dies mid-compile: its connection closes,
	// nobody deletes the lock, only its TTL frees it.
	const ttl = 2 * time.Second
	dead := connect(t, srv.URL)
	djs, err := natsjs.New(dead)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := djs.KeyValue(context.Background(), srv.Config.Engines.Name)
	if err != nil {
		t.Fatal(err)
	}
	lock := shapeKey(e.ModelID(), 1, 192).Lock()
	if _, err := kv.Create(context.Background(), lock, []byte(`{"by":"dead"}`), natsjs.KeyTTL(ttl)); err != nil {
		t.Fatal(err)
	}
	taken := time.Now()
	dead.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := member.Compile(ctx, 1, 192); err != nil {
		t.Fatal(err)
	}
	waited := time.Since(taken)
	t.Logf("the survivor compiled 1x192 %v after the dead holder took the lock (ttl %v)", waited, ttl)
	if waited < ttl-200*time.Millisecond {
		t.Errorf("compiled after %v, before the dead holder's lock could expire (%v)", waited, ttl)
	}
	if st := member.Stats(); st.Compiles != 1 || !e.ShapeWarmed(1, 192) || e.warmed(1, 192) != 1 {
		t.Errorf("stats %+v, warmed %v x%d; want one compile by the survivor", st, e.ShapeWarmed(1, 192), e.warmed(1, 192))
	}
}

// TestFleetMemberKilledMidCompile kills a real member while it builds: its
// connection drops, so it can neither renew nor release its lock. A peer
// that wants the same shape waits for the lock's TTL, then builds it.
func TestFleetMemberKilledMidCompile(t *testing.T) {
	srv := newServer(t, nil)
	doomed := newCounting(openEngine(t, guardedConfig()))
	doomed.gate = make(chan struct{}) // its compile never finishes
	model := doomed.ModelID()
	nc := connect(t, srv.URL)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second
	victim, err := fleet.Join(t.Context(), store(t, js, srv), doomed, fleet.Config{
		Model: model, Member: "doomed", Tick: 50 * time.Millisecond,
		IdleQuiet: time.Hour, LockTTL: ttl, Logger: testLogger(t).With("member", "doomed"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = victim.Stop(context.Background()) })
	survivorEng := newCounting(openEngine(t, guardedConfig()))
	survivor := startMember(t, srv, survivorEng, model, "survivor", nil)

	go func() { _ = victim.Compile(context.Background(), 2, 320) }()
	lock := shapeKey(model, 2, 320).Lock()
	kv := bucket(t, srv)
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		_, err := kv.Get(context.Background(), lock)
		return err
	})
	// Let the holder renew once, so the TTL runs from a renewal, then kill it.
	renewedFor(t, store(t, srv.JS, srv), time.Nanosecond, lock)
	killed := time.Now()
	nc.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := survivor.Compile(ctx, 2, 320); err != nil {
		t.Fatal(err)
	}
	waited := time.Since(killed)
	t.Logf("the survivor built 2x320 %v after the holder died (lock ttl %v, renewed every %v)", waited, ttl, ttl/3)
	if waited < ttl/3 {
		t.Errorf("built %v after the kill: the dead holder's lock did not hold", waited)
	}
	if st := survivor.Stats(); st.Compiles != 1 || survivorEng.warmed(2, 320) != 1 || !survivorEng.ShapeWarmed(2, 320) {
		t.Errorf("survivor %+v, %d warm-ups of 2x320; want one compile", st, survivorEng.warmed(2, 320))
	}
	if doomed.ShapeWarmed(2, 320) {
		t.Error("the killed member finished its compile")
	}
}

// TestFleetCompileEndsWithTheFleet: a Compile waiting for a peer's lock
// returns when the member leaves the fleet, instead of waiting for news
// that can no longer come.
func TestFleetCompileEndsWithTheFleet(t *testing.T) {
	srv := newServer(t, nil)
	e := openEngine(t, guardedConfig())
	m := startMember(t, srv, e, e.ModelID(), "leaving", nil)
	lock := shapeKey(e.ModelID(), 1, 160).Lock()
	if _, err := bucket(t, srv).Create(context.Background(), lock, []byte(`{"by":"peer"}`), natsjs.KeyTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Compile(context.Background(), 1, 160) }()
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if m.Stats().Locks != 1 {
			return errors.New("the member has not seen the peer's lock")
		}
		return nil
	})
	select {
	case err := <-done:
		t.Fatalf("Compile returned %v while a peer holds the lock", err)
	case <-time.After(200 * time.Millisecond):
	}
	_ = m.Stop(context.Background())
	select {
	case err := <-done:
		if !errors.Is(err, fleet.ErrStopped) {
			t.Errorf("Compile after Stop: %v, want ErrStopped", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Compile still waiting after the fleet stopped")
	}
	if e.ShapeWarmed(1, 160) {
		t.Error("the leaving member built the shape a peer holds the lock of")
	}
}
