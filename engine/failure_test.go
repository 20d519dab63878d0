package engine

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetembed/jetembed/internal/testkit"
	"github.com/jetembed/jetembed/schema"
)

// The engine's behaviour when sessions fail, calls pile up or time out:
// circuit breaker and reload, unavailability, admission, deadlines.

func TestBreakerReloads(t *testing.T) {
	var fails atomic.Int32
	fails.Store(2)
	var closed atomic.Int32
	f := &factory{mk: func(int) *fakeRunner {
		return &fakeRunner{closed: &closed, fail: func() error {
			if fails.Add(-1) >= 0 {
				return errBoom
			}
			return nil
		}}
	}}
	cfg := testConfig()
	cfg.BreakerThreshold = 2
	e := newTestEngine(t, cfg, f)
	text := []Text{{Text: "x y", Outputs: Dense}}
	for i := 0; i < 2; i++ {
		embs, _, err := e.Embed(context.Background(), text, Call{})
		if err != nil {
			t.Fatal(err)
		}
		if embs[0].Err == nil || embs[0].Err.Code != schema.CodeEngineUnavailable || !embs[0].Err.Retriable {
			t.Fatalf("run %d: err %v, want retriable engine_unavailable", i, embs[0].Err)
		}
	}
	if f.count() != 2 || closed.Load() != 1 {
		t.Fatalf("after 2 errors: %d loads, %d closes; want the session dropped and reloaded", f.count(), closed.Load())
	}
	embs, _, _ := e.Embed(context.Background(), text, Call{})
	if embs[0].Err != nil {
		t.Fatalf("after reload: %v", embs[0].Err)
	}
	s := e.Stats().Sessions[0]
	if s.Reloads != 1 || s.Errors != 2 || s.ConsecutiveErrors != 0 || !s.Loaded {
		t.Errorf("stats %+v, want 1 reload, 2 errors, loaded", s)
	}
}

func TestUnavailable(t *testing.T) {
	var loadOK atomic.Bool
	f := &factory{
		loadErr: func(n int) error {
			if n == 1 || loadOK.Load() {
				return nil
			}
			return errBoom
		},
		mk: func(int) *fakeRunner { return &fakeRunner{fail: func() error { return errBoom }} },
	}
	cfg := testConfig()
	cfg.BreakerThreshold = 1
	e := newTestEngine(t, cfg, f)
	if err := e.Health(context.Background()); err != nil {
		t.Fatalf("health at start: %v", err)
	}
	embs, _, _ := e.Embed(context.Background(), []Text{{Text: "x"}}, Call{})
	if embs[0].Err == nil || embs[0].Err.Code != schema.CodeEngineUnavailable {
		t.Fatalf("failing run: %v", embs[0].Err)
	}
	if err := e.Health(context.Background()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("health with the only session dropped: %v, want ErrUnavailable", err)
	}
	embs, _, err := e.Embed(context.Background(), []Text{{Text: "x"}, {Text: "y z"}}, Call{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range embs {
		if embs[i].Err == nil || embs[i].Err.Code != schema.CodeEngineUnavailable || !embs[i].Err.Retriable {
			t.Errorf("text %d while unavailable: %v", i, embs[i].Err)
		}
	}
	if e.Stats().Sessions[0].LoadError == nil {
		t.Error("stats do not show the load error")
	}
	// Loading works again: the session comes back on its own.
	loadOK.Store(true)
	testkit.CheckFor(t, 5*time.Second, time.Millisecond, func() error { return e.Health(context.Background()) })
}

func TestOverloaded(t *testing.T) {
	block := make(chan struct{})
	f := &factory{mk: func(int) *fakeRunner { return &fakeRunner{block: block} }}
	cfg := testConfig()
	cfg.AdmissionTokens = 64
	e := newTestEngine(t, cfg, f)
	first := make(chan error, 1)
	go func() {
		_, _, err := e.Embed(context.Background(), []Text{{Text: words(60, 0)}}, Call{})
		first <- err
	}()
	testkit.CheckFor(t, 5*time.Second, time.Millisecond, func() error {
		if e.Stats().AdmittedTokens == 0 {
			return errors.New("first call not admitted")
		}
		return nil
	})
	_, _, err := e.Embed(context.Background(), []Text{{Text: words(10, 0)}}, Call{NoWait: true})
	if !errors.Is(err, &schema.Error{Code: schema.CodeOverloaded}) {
		t.Fatalf("second call: %v, want overloaded", err)
	}
	waited := make(chan error, 1)
	go func() {
		embs, _, err := e.Embed(context.Background(), []Text{{Text: words(10, 0)}}, Call{})
		if err == nil && embs[0].Err != nil {
			err = embs[0].Err
		}
		waited <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, _, err := e.Embed(ctx, []Text{{Text: "x"}}, Call{}); !errors.Is(err, &schema.Error{Code: schema.CodeDeadlineExceeded}) {
		t.Errorf("waiting call past its deadline: %v, want deadline_exceeded", err)
	}
	close(block)
	if err := <-first; err != nil {
		t.Errorf("first call: %v", err)
	}
	if err := <-waited; err != nil {
		t.Errorf("waiting call: %v", err)
	}
	if n := e.Stats().AdmittedTokens; n != 0 {
		t.Errorf("%d tokens still in flight", n)
	}
}

// TestDeadline cancels a call whose chunk is running: its items fail with
// deadline_exceeded, and the breaker does not count the cancellation.
func TestDeadline(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	f := &factory{mk: func(int) *fakeRunner { return &fakeRunner{block: block} }}
	cfg := testConfig()
	cfg.BreakerThreshold = 1
	e := newTestEngine(t, cfg, f)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	embs, _, err := e.Embed(ctx, []Text{{Text: "a"}, {Text: words(20, 1)}}, Call{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range embs {
		if embs[i].Err == nil || embs[i].Err.Code != schema.CodeDeadlineExceeded {
			t.Errorf("text %d: %v, want deadline_exceeded", i, embs[i].Err)
		}
	}
	if s := e.Stats().Sessions[0]; s.Errors != 0 || !s.Loaded || f.count() != 1 {
		t.Errorf("cancellation counted by the breaker: %+v, %d loads", s, f.count())
	}
}

// TestStartWithSessionDown starts two sessions of which one cannot load:
// the engine warms and serves with the other while it retries.
func TestStartWithSessionDown(t *testing.T) {
	var down atomic.Bool
	down.Store(true)
	mk := func(session int) (Runner, error) {
		if session == 1 && down.Load() {
			return nil, errBoom
		}
		return &fakeRunner{}, nil
	}
	cfg := testConfig()
	cfg.Sessions = 2
	cfg.NoWarmup, cfg.Warmup = false, []Shape{{1, 8}}
	e, err := New(context.Background(), cfg, fakeTok{}, fakeModel(64), mk)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	st := e.Stats()
	if !st.Sessions[0].Loaded || st.Sessions[1].Loaded || !errors.Is(st.Sessions[1].LoadError, errBoom) || st.Ceiling != 8 {
		t.Fatalf("stats %+v", st)
	}
	if err := e.Canary(context.Background()); err != nil {
		t.Fatal(err)
	}
	down.Store(false)
	testkit.CheckFor(t, 5*time.Second, time.Millisecond, func() error {
		if !e.Stats().Sessions[1].Loaded {
			return errors.New("session 1 not loaded")
		}
		return nil
	})
}

// TestReloadRewarms checks that with the guard on, a session reloaded by
// the breaker runs the warmed shapes before it takes chunks again.
func TestReloadRewarms(t *testing.T) {
	runs := make(chan RunInput, 64)
	var loads atomic.Int32
	f := &factory{mk: func(int) *fakeRunner {
		if loads.Add(1) == 1 {
			return &fakeRunner{inRun: runs, fail: func() error { return errBoom }}
		}
		return &fakeRunner{inRun: runs}
	}}
	cfg := testConfig()
	cfg.Guard, cfg.BreakerThreshold = true, 1
	// A warm-up grid would fail on the first runner: the coverage says
	// instead that the shapes were warmed (as the fleet would raise it).
	cfg.Coverage = NewCoverage()
	cfg.Coverage.Raise(1, 8)
	cfg.Coverage.Raise(2, 16)
	e := newTestEngine(t, cfg, f)
	embs, _, _ := e.Embed(context.Background(), []Text{{Text: "a b"}}, Call{})
	if embs[0].Err == nil {
		t.Fatal("first runner should fail")
	}
	var shapes []Shape
	for len(runs) > 0 {
		in := <-runs
		shapes = append(shapes, Shape{in.Batch, in.Seq})
	}
	// The failed chunk (1x8), then the re-warm of both shapes.
	if want := []Shape{{1, 8}, {1, 8}, {2, 16}}; !slices.Equal(shapes, want) {
		t.Errorf("runs %v, want %v", shapes, want)
	}
	embs, _, _ = e.Embed(context.Background(), []Text{{Text: "a b"}}, Call{})
	if embs[0].Err != nil {
		t.Errorf("after reload: %v", embs[0].Err)
	}
}
