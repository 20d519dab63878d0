package gateway

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestWindowAdmission: parts wait their turn in arrival order within the
// window; a call is refused only once the measured drain rate says the
// tokens ahead of it could not drain before its deadline, with the
// Retry-After at which they would.
func TestWindowAdmission(t *testing.T) {
	// In a synctest bubble the clock moves only by the test's sleeps.
	synctest.Test(t, func(t *testing.T) { windowAdmission(t) })

	// Parts are granted in arrival order, a large one before small ones. In
	// a synctest bubble, Wait is "every part is waiting": no guessed sleep.
	synctest.Test(t, func(t *testing.T) {
		w2 := &window{cap: 10}
		if _, err := w2.acquire(context.Background(), 8); err != nil {
			t.Fatal(err)
		}
		big, small := make(chan struct{}), make(chan struct{})
		go func() { _, _ = w2.acquire(context.Background(), 10); close(big) }()
		synctest.Wait()
		go func() { _, _ = w2.acquire(context.Background(), 1); close(small) }()
		synctest.Wait()
		select {
		case <-small:
			t.Fatal("a small part passed a large one waiting")
		default:
		}
		w2.release(8, true)
		<-big
		synctest.Wait()
		select {
		case <-small:
			t.Fatal("the small part went while the large one holds the whole window")
		default:
		}
		w2.release(10, true)
		<-small
	})

	// A waiting part gives up with its context.
	ctx, cancel := context.WithCancel(context.Background())
	w3 := &window{cap: 1}
	_, _ = w3.acquire(context.Background(), 1)
	done := make(chan error, 1)
	go func() { _, err := w3.acquire(ctx, 1); done <- err }()
	cancel()
	if err := <-done; err == nil {
		t.Error("a canceled wait succeeded")
	}
	w3.release(1, false)
	if w3.used != 0 || len(w3.waiters) != 0 {
		t.Errorf("window left with %d used, %d waiters", w3.used, len(w3.waiters))
	}
}

// windowAdmission is TestWindowAdmission's measured part, in a bubble.
func windowAdmission(t *testing.T) {
	w := &window{cap: 100}
	now := time.Now()
	// Nothing measured yet: every call is admitted, whatever waits.
	if _, ok := w.admit(1000, now, now.Add(time.Second)); !ok {
		t.Fatal("refused before any rate was measured")
	}
	w.forfeit(1000)

	// Measure: 100 tokens drained over 1 s busy = 100 tokens/s.
	n, err := w.acquire(context.Background(), 100)
	if err != nil || n != 100 {
		t.Fatal(n, err)
	}
	time.Sleep(time.Second)
	w.release(100, true)
	if rate := w.meter.Rate(); rate < 90 || rate > 110 {
		t.Fatalf("rate %v, want about 100 tokens/s", rate)
	}

	// The window is full (100 in flight) and 300 are queued: a call of
	// 100 more must wait for 400 - 100 = 400 tokens... about 4 s.
	if _, err := w.acquire(context.Background(), 100); err != nil {
		t.Fatal(err)
	}
	if _, ok := w.admit(300, now, now.Add(time.Minute)); !ok {
		t.Fatal("a call that can start in time was refused")
	}
	retry, ok := w.admit(100, now, now.Add(2*time.Second))
	if ok {
		t.Fatal("a call that cannot start before its deadline was admitted")
	}
	if retry < time.Second || retry > 3*time.Second {
		t.Errorf("Retry-After %s, want about 4 s - 2 s = 2 s", retry)
	}
	if _, ok := w.admit(100, now, now.Add(10*time.Second)); !ok {
		t.Error("a call with time enough was refused")
	}
}
