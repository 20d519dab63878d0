package consumer

import (
	"bytes"
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/schema"
)

// submitAsync delivers j and returns its message, settled later.
func submitAsync(t *testing.T, r *rig, j *schema.Job, subject string) *fakeMsg {
	t.Helper()
	d, m := delivery(t, j, schema.EncodingMsgpack, 1)
	if subject != "" {
		d.Subject = subject
	}
	if err := r.c.Submit(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestFlightComputedOnce: a text in flight for one job is not run again
// for another job of the same tenant that holds it meanwhile: the second
// job runs only its other text, waits, and gets the same bytes; its usage
// counts the text's tokens (none cached, none padded for it). Another
// tenant's identical text runs for that tenant.
func TestFlightComputedOnce(t *testing.T) {
	emb := &fakeEmb{block: make(chan struct{}), started: make(chan struct{}, 10),
		blockIf: func(texts []engine.Text) bool { return texts[0].Text == "shared" || texts[0].Text == "first only" }}
	r := newRig(t, Config{}, emb, nil)
	a := schema.NewJob("a", "shared", "first only")
	a.Reply = "r.a"
	ma := submitAsync(t, r, a, "")
	<-emb.started
	b := schema.NewJob("b", "second only", "shared")
	b.Reply = "r.b"
	mb := submitAsync(t, r, b, "")
	<-emb.started // b's own text
	if n := r.c.flights.inFlight(); n != 2 {
		t.Errorf("%d texts in flight, want a's 2", n)
	}
	close(emb.block)
	for _, m := range []*fakeMsg{ma, mb} {
		if got := m.wait(t); !slices.Equal(got, []string{"ack"}) {
			t.Fatalf("calls %v, want [ack]", got)
		}
	}
	runs := embedded(emb)
	slices.Sort(runs)
	if !slices.Equal(runs, []string{"first only", "second only", "shared"}) {
		t.Errorf("ran %q, want each text once", runs)
	}
	ra, _ := r.resultFor(t, "a")
	rb, _ := r.resultFor(t, "b")
	ia, ib := itemBytes(t, &schema.Result{Items: ra.Items[:1]}, schema.EncodingMsgpack), itemBytes(t, &schema.Result{Items: rb.Items[1:]}, schema.EncodingMsgpack)
	if !bytes.Equal(ia, ib) {
		t.Error("the followed text's item differs from the one computed")
	}
	if rb.Usage.Tokens != ra.Usage.Tokens-len("first only")+len("second only") || rb.Usage.Cached != 0 {
		t.Errorf("b's usage %+v (a's %+v): want the shared text's tokens counted, none cached", rb.Usage, ra.Usage)
	}
	if n := r.c.flights.inFlight(); n != 0 {
		t.Errorf("%d texts left on the board", n)
	}

	// Another tenant: its own run.
	before := len(embedded(emb))
	c := schema.NewJob("c", "shared")
	c.Reply = "r.c"
	mc := submitAsync(t, r, c, "embed.jobs.other")
	if got := mc.wait(t); !slices.Equal(got, []string{"ack"}) {
		t.Fatalf("other tenant: %v", got)
	}
	if n := len(embedded(emb)) - before; n != 1 {
		t.Errorf("the other tenant's text ran %d times, want once", n)
	}
}

// TestFlightLeaderFails: when the job that had a text in flight fails
// (a retriable refusal: it is NAKed), the job that followed it runs the
// text itself and is answered.
func TestFlightLeaderFails(t *testing.T) {
	var calls atomic.Int32
	emb := &fakeEmb{block: make(chan struct{}), started: make(chan struct{}, 10),
		blockIf: func(texts []engine.Text) bool { return texts[0].Text == "shared" },
		refuse: func(text string) *schema.Error {
			if text == "shared" && calls.Add(1) == 1 {
				return schema.Errorf(schema.CodeEngineUnavailable, "session dropped")
			}
			return nil
		},
	}
	r := newRig(t, Config{}, emb, nil)
	a := schema.NewJob("a", "shared")
	a.Reply = "r.a"
	ma := submitAsync(t, r, a, "")
	<-emb.started
	b := schema.NewJob("b", "own", "shared")
	b.Reply = "r.b"
	mb := submitAsync(t, r, b, "")
	<-emb.started // b's own text ("own": not blocked)
	close(emb.block)
	if got := ma.wait(t); len(got) != 1 || got[0] == "ack" {
		t.Errorf("the failed job: %v, want a NAK", got)
	}
	if got := mb.wait(t); !slices.Equal(got, []string{"ack"}) {
		t.Fatalf("the follower: %v, want [ack]", got)
	}
	rb, _ := r.resultFor(t, "b")
	if rb.Error != nil || len(rb.Items) != 2 || rb.Items[1].Dense == nil {
		t.Errorf("follower's result %+v", rb)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("the shared text was tried %d times, want twice (the leader's, then the follower's)", n)
	}
}

// TestFlightFollowerHoldsBudget: a stored job whose every text is in
// flight for another job makes no Embed call of its own, but holds budget
// for the results it waits for (a call that runs nothing,
// engine.Call.Hold): with room in the budget its Submit returns while the
// text is still in flight, so the fetch loop goes on; with the budget full
// it waits for room like any job, so a flood of one repeated text cannot
// have the fetch loop take (and hold the results of) jobs past the budget.
func TestFlightFollowerHoldsBudget(t *testing.T) {
	for _, c := range []struct {
		name  string
		slots int // the fake engine's budget, in calls
		early bool
	}{
		{"room", 2, true},
		{"full", 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			emb := &fakeEmb{block: make(chan struct{}), started: make(chan struct{}, 10), slots: make(chan struct{}, c.slots)}
			r := newRig(t, Config{}, emb, nil)
			a := schema.NewJob("a", "shared")
			a.Reply = "r.a"
			ma := submitAsync(t, r, a, "")
			<-emb.started
			b := schema.NewJob("b", "shared")
			b.Reply = "r.b"
			d, mb := delivery(t, b, schema.EncodingMsgpack, 1)
			returned := make(chan error, 1)
			go func() { returned <- r.c.Submit(context.Background(), d) }()
			if c.early {
				// Bounded so that a follower that waits for its leader fails
				// here, not at the test binary's timeout.
				select {
				case err := <-returned:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(time.Minute):
					t.Fatal("the follower's Submit did not return with room in the budget while the text it follows was in flight")
				}
				if s := r.c.Stats(); s.Held != 2 || len(emb.slots) != 2 {
					t.Errorf("with the text in flight: %d jobs held, %d of the budget's slots taken; want 2 and 2", s.Held, len(emb.slots))
				}
				if got := mb.Calls(); len(got) != 0 {
					t.Errorf("the follower was settled (%v) before the text it follows was done", got)
				}
			} else {
				waitFor(t, func() bool { s := r.c.Stats(); return s.Held == 1 && s.Waiting == 1 })
				select {
				case err := <-returned:
					t.Fatalf("the follower's Submit returned (%v) with the budget full", err)
				default:
				}
			}
			close(emb.block)
			if !c.early {
				if err := <-returned; err != nil {
					t.Fatal(err)
				}
			}
			for _, m := range []*fakeMsg{ma, mb} {
				if got := m.wait(t); !slices.Equal(got, []string{"ack"}) {
					t.Fatalf("calls %v, want [ack]", got)
				}
			}
			if n := len(embedded(emb)); n != 1 {
				t.Errorf("the shared text ran %d times", n)
			}
			waitFor(t, func() bool { return len(emb.slots) == 0 })
		})
	}
}

// TestFlightLeaderEndNotShared: what ends the leader's run of a text
// without being the text's own answer is not shared with the job that
// follows it, which runs the text itself and gets its vectors:
// deadline_exceeded (the engine's answer for the texts of a call whose
// context ended: the leader left the queue, or stops) and an internal
// error (a fault of that run).
func TestFlightLeaderEndNotShared(t *testing.T) {
	for _, code := range []schema.Code{schema.CodeDeadlineExceeded, schema.CodeInternal} {
		t.Run(string(code), func(t *testing.T) {
			var calls atomic.Int32
			emb := &fakeEmb{block: make(chan struct{}), started: make(chan struct{}, 10),
				blockIf: func(texts []engine.Text) bool { return texts[0].Text == "shared" },
				refuse: func(text string) *schema.Error {
					if text == "shared" && calls.Add(1) == 1 {
						return schema.Errorf(code, "the leader's run ended")
					}
					return nil
				},
			}
			r := newRig(t, Config{}, emb, nil)
			a := schema.NewJob("a", "shared")
			a.Reply = "r.a"
			ma := submitAsync(t, r, a, "")
			<-emb.started
			b := schema.NewJob("b", "own", "shared")
			b.Reply = "r.b"
			mb := submitAsync(t, r, b, "")
			<-emb.started // b's own text
			close(emb.block)
			ma.wait(t)
			if got := mb.wait(t); !slices.Equal(got, []string{"ack"}) {
				t.Fatalf("the follower: %v, want [ack]", got)
			}
			rb, _ := r.resultFor(t, "b")
			if rb.Error != nil || len(rb.Items) != 2 || rb.Items[1].Error != nil || rb.Items[1].Dense == nil {
				t.Errorf("follower's shared item %+v: want its vectors, not the leader's %s", rb.Items[1], code)
			}
			if n := calls.Load(); n != 2 {
				t.Errorf("the shared text was tried %d times, want twice (the leader's, then the follower's)", n)
			}
		})
	}
}
