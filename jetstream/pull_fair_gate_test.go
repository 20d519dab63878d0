package jetstream

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jetembed/jetembed/consumer"
)

// heldSink holds each Submit until the test lets it go, and says
// which tenant's delivery it took.
type heldSink struct {
	took chan string
	go_  chan struct{}
}

func (s *heldSink) Submit(_ context.Context, d consumer.Delivery) error {
	s.took <- string(d.(*consumer.Stored).Data)
	<-s.go_
	return nil
}

// waitInGate waits until n deliveries of tenants wait in g, or fails the
// test when ctx ends first.
func waitInGate(ctx context.Context, t *testing.T, g *fairGate, n int, tenants ...string) {
	t.Helper()
	for {
		g.mu.Lock()
		got := 0
		for _, tenant := range tenants {
			got += len(g.waiting[tenant])
		}
		g.mu.Unlock()
		if got == n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d deliveries of %q waiting, want %d", got, tenants, n)
		case <-time.After(time.Millisecond):
		}
	}
}

// TestFairGateTwoLoopsOfOneTenant: while a tenant's fetch loop is replaced
// (the template changed), its old loop drains through the gate beside the
// new one, so two deliveries of one tenant wait at once. Both are handed
// over in turn. Before, the second overwrote the first's place: that
// delivery was never handed over and its loop hung, its job held (kept in
// progress) and never redelivered.
func TestFairGateTwoLoopsOfOneTenant(t *testing.T) {
	sink := &heldSink{took: make(chan string, 8), go_: make(chan struct{})}
	g := newFairGate(sink, Shares{}, newQuotas(Shares{}, nil))
	b := g.forTenant("b", func() bool { return false })
	oldA := g.forTenant("a", func() bool { return false })
	newA := g.forTenant("a", func() bool { return false })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	submit := func(s Sink, data string) chan error {
		done := make(chan error, 1)
		go func() { done <- s.Submit(ctx, &consumer.Stored{Arrival: consumer.Arrival{Data: []byte(data)}}) }()
		return done
	}
	bDone := submit(b, "b1")
	if got := <-sink.took; got != "b1" { // b holds the gate
		t.Fatalf("took %q first", got)
	}
	oldDone := submit(oldA, "a-old")
	newDone := submit(newA, "a-new")
	// Both of a's deliveries wait in the gate before b's is let go.
	waitInGate(ctx, t, g, 2, "a")
	close(sink.go_) // every Submit returns at once from now on
	for _, done := range []chan error{bDone, oldDone, newDone} {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("a delivery of a was never handed over")
		}
	}
	got := map[string]bool{<-sink.took: true, <-sink.took: true}
	if !got["a-old"] || !got["a-new"] {
		t.Errorf("handed over %v, want both of a's", got)
	}
}

// stepSink says which delivery it took and holds it until the test steps.
type stepSink struct {
	took chan string
	step chan struct{}
}

func (s *stepSink) Submit(_ context.Context, d consumer.Delivery) error {
	s.took <- string(d.(*consumer.Stored).Data[:1])
	<-s.step
	return nil
}

// TestFairGateBigDeliveryBanksNoCredit: a tenant back from idle with one
// large delivery goes ahead by its credit (maxLag deliveries of that
// size), but the virtual time does not go back to that delivery's start
// tag: else the credit stays banked, and the tenant's small deliveries that
// follow go ahead of a backlogged tenant for thousands of turns.
func TestFairGateBigDeliveryBanksNoCredit(t *testing.T) {
	sink := &stepSink{took: make(chan string), step: make(chan struct{})}
	g := newFairGate(sink, Shares{}, newQuotas(Shares{}, nil))
	none := func() bool { return false }
	a, b, c := g.forTenant("a", none), g.forTenant("b", none), g.forTenant("c", none)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	submit := func(s Sink, data string) chan error {
		done := make(chan error, 1)
		go func() { done <- s.Submit(ctx, &consumer.Stored{Arrival: consumer.Arrival{Data: []byte(data)}}) }()
		return done
	}
	pass := func(s Sink, data string) { // handed over alone, let go at once
		done := submit(s, data)
		<-sink.took
		sink.step <- struct{}{}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for range 100 { // b's backlog has run a while: the virtual time is ahead
		pass(b, "b"+strings.Repeat("x", 999))
	}
	pass(a, "a"+strings.Repeat("x", 7999)) // a comes back with one large job
	// c's job holds the gate while b's next and 300 small ones of a wait.
	cDone := submit(c, "c")
	<-sink.took
	bDone := submit(b, "b"+strings.Repeat("x", 999))
	var aDone []chan error
	for range 300 {
		aDone = append(aDone, submit(a, "a123456789"))
	}
	waitInGate(ctx, t, g, 301, "a", "b")
	sink.step <- struct{}{}
	bAt := -1
	for i := range 301 {
		if <-sink.took == "b" {
			bAt = i
		}
		sink.step <- struct{}{}
	}
	for _, done := range append(aDone, cDone, bDone) {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("b's job went after %d of a's small jobs", bAt)
	if bAt > 150 {
		t.Errorf("b's job went after %d of a's small jobs (a's credit from its large one stayed banked), want after at most about 110", bAt)
	}
}

// TestFairGateWakesForTheSoonestQuota: the gate waits for a quota to free
// with one timer. A tenant whose quota frees in a second, arriving while
// the timer is set for another's in nine minutes, is handed over after
// its second, not after the other's nine minutes.
func TestFairGateWakesForTheSoonestQuota(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shares := Shares{Quotas: map[string]Quota{"slow": {TokensPerMinute: 60}, "fast": {TokensPerMinute: 6000}}}
		q := newQuotas(shares, nil)
		sink := &takeSink{}
		g := newFairGate(sink, shares, q)
		none := func() bool { return false }
		if _, wait := q.take("slow", 600); wait != 0 { // 540 s in debt
			t.Fatal(wait)
		}
		if _, wait := q.take("fast", 6100); wait != 0 { // 1 s in debt
			t.Fatal(wait)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		submit := func(s Sink, data string) chan error {
			done := make(chan error, 1)
			go func() { done <- s.Submit(ctx, &consumer.Stored{Arrival: consumer.Arrival{Data: []byte(data)}}) }()
			return done
		}
		slow := submit(g.forTenant("slow", none), "s")
		synctest.Wait() // the timer is set for slow's 540 s
		fast := submit(g.forTenant("fast", none), "f")
		synctest.Wait()
		start := time.Now()
		select {
		case err := <-fast:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Hour):
			t.Fatal("fast's delivery not handed over in an hour")
		}
		if waited := time.Since(start); waited > 2*time.Second {
			t.Errorf("fast's delivery handed over after %v, want about its quota's 1 s", waited)
		}
		if err := <-slow; err != nil { // at its 540 s, in the bubble's time
			t.Fatal(err)
		}
	})
}

// TestFairGateForgetsOnlyItsLoop: a tenant's old fetch loop, stopped in
// the background after its consumer went (made again since, with a new
// loop), forgets only itself: the tenant's new loop keeps its place in
// the gate (its "more buffered", its finish tag and its count).
func TestFairGateForgetsOnlyItsLoop(t *testing.T) {
	g := newFairGate(&takeSink{}, Shares{}, newQuotas(Shares{}, nil))
	old := g.forTenant("a", func() bool { return false })
	if err := old.Submit(context.Background(), &consumer.Stored{Arrival: consumer.Arrival{Data: []byte("a")}}); err != nil {
		t.Fatal(err)
	}
	cur := g.forTenant("a", func() bool { return true })
	g.forget(old)
	g.mu.Lock()
	kept, jobs := g.more["a"] == cur.loop, g.jobs["a"]
	g.mu.Unlock()
	if !kept || jobs != 1 {
		t.Errorf("after the old loop forgot itself: new loop kept %v, jobs %d; want kept, 1", kept, jobs)
	}
	g.forget(cur)
	g.mu.Lock()
	_, left := g.more["a"]
	g.mu.Unlock()
	if left {
		t.Error("the current loop's forget left the tenant in the gate")
	}
}
