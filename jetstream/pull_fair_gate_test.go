package jetstream

import (
	"context"
	"testing"
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
	for {
		g.mu.Lock()
		n := len(g.waiting["a"])
		g.mu.Unlock()
		if n == 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d of a's deliveries waiting", n)
		case <-time.After(time.Millisecond):
		}
	}
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
