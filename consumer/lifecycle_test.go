package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/schema"
)

// TestInProgress: a held message gets InProgress each time it waited the
// configured fraction of AckWait, and none after it is settled. The clock
// is synctest's: the test waits whole AckWaits without sleeping.
func TestInProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		emb := &fakeEmb{block: make(chan struct{})}
		r := newRig(t, Config{Delivery: DeliveryLimits{AckWait: 8 * time.Second}, InProgressFraction: 0.25}, emb, nil)
		d, m := delivery(t, schema.NewJob("slow", "text"), schema.EncodingJSON, 1)
		if err := r.c.Submit(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		// A heartbeat every 2s while the embedder holds it: 3 in 7s.
		time.Sleep(7 * time.Second)
		synctest.Wait()
		if got := m.Calls(); !slices.Equal(got, []string{"progress", "progress", "progress"}) {
			t.Fatalf("calls after 7s held: %v, want three InProgress", got)
		}
		close(emb.block)
		m.wait(t)
		calls := m.Calls()
		if calls[len(calls)-1] != "ack" {
			t.Fatalf("calls %v: want the ack last", calls)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if after := m.Calls(); len(after) != len(calls) {
			t.Errorf("calls after settling: %v", after[len(calls):])
		}
	})
}

// TestInProgressQueued: a job waiting in Submit for room in the in-flight
// budget (not only one running) is kept alive too, and request-reply
// deliveries never get InProgress (synctest's clock, so AckWait can be
// seconds).
func TestInProgressQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Room for one job in the engine: the second waits in Submit.
		emb := &fakeEmb{block: make(chan struct{}), slots: make(chan struct{}, 1)}
		r := newRig(t, Config{Delivery: DeliveryLimits{AckWait: 8 * time.Second}, InProgressFraction: 0.25}, emb, nil)
		d1, m1 := delivery(t, schema.NewJob("running", "a"), schema.EncodingJSON, 1)
		if err := r.c.Submit(context.Background(), d1); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return len(emb.Calls()) == 1 })
		d2, m2 := delivery(t, schema.NewJob("waiting", "b"), schema.EncodingJSON, 1)
		submitted := make(chan error, 1)
		go func() { submitted <- r.c.Submit(context.Background(), d2) }()
		waitFor(t, func() bool { return slices.Contains(m2.Calls(), "progress") && slices.Contains(m1.Calls(), "progress") })
		if n := len(emb.Calls()); n != 1 {
			t.Fatalf("%d Embed calls, want the second job still waiting for room", n)
		}
		d3, m3 := delivery(t, schema.NewJob("request", "c"), schema.EncodingJSON, 1)
		if err := r.c.Submit(context.Background(), asRequest(d3, func(map[string][]string, []byte) error { return nil })); err != nil {
			t.Fatal(err)
		}
		close(emb.block)
		m1.wait(t)
		if err := <-submitted; err != nil {
			t.Errorf("Submit of the waiting job: %v", err)
		}
		m2.wait(t)
		m3.wait(t)
		if slices.Contains(m3.Calls(), "progress") {
			t.Errorf("request-reply delivery got InProgress: %v", m3.Calls())
		}
	})
}

// TestDrain: Drain finishes the job in flight, NAKs without delay those
// waiting for room, refuses new deliveries, and Run then returns nil.
func TestDrain(t *testing.T) {
	// Room for one job in the engine: the others wait in Submit.
	emb := &fakeEmb{block: make(chan struct{}), started: make(chan struct{}, 10), slots: make(chan struct{}, 1)}
	r := newRig(t, Config{}, emb, nil)
	running, rm := delivery(t, schema.NewJob("running", "a"), schema.EncodingJSON, 1)
	if err := r.c.Submit(context.Background(), running); err != nil {
		t.Fatal(err)
	}
	<-emb.started
	var waiting []*fakeMsg
	refused := make(chan error, 2)
	for _, id := range []string{"q1", "q2"} {
		d, m := delivery(t, schema.NewJob(id, "b "+id), schema.EncodingJSON, 1)
		go func() { refused <- r.c.Submit(context.Background(), d) }()
		waiting = append(waiting, m)
	}
	waitFor(t, func() bool { return r.c.waitingCount() == 2 })
	drained := make(chan error, 1)
	go func() { drained <- r.c.Drain(context.Background()) }()
	for _, m := range waiting {
		if got := m.wait(t); !slices.Equal(got, []string{"nak"}) {
			t.Errorf("waiting job: calls %v, want [nak] without delay", got)
		}
		if err := <-refused; !errors.Is(err, ErrDraining) {
			t.Errorf("Submit of a waiting job: %v, want ErrDraining", err)
		}
	}
	late, lm := delivery(t, schema.NewJob("late", "c"), schema.EncodingJSON, 1)
	if err := r.c.Submit(context.Background(), late); !errors.Is(err, ErrDraining) {
		t.Errorf("Submit while draining: %v, want ErrDraining", err)
	}
	if got := lm.wait(t); !slices.Equal(got, []string{"nak"}) {
		t.Errorf("late job: calls %v, want [nak]", got)
	}
	select {
	case err := <-drained:
		t.Fatalf("Drain returned %v with a job still running", err)
	default:
	}
	close(emb.block)
	if got := rm.wait(t); !slices.Equal(got, []string{"ack"}) {
		t.Errorf("running job: calls %v, want [ack]", got)
	}
	if err := <-drained; err != nil {
		t.Errorf("Drain: %v", err)
	}
	if err := <-r.run; err != nil {
		t.Errorf("Run after Drain: %v", err)
	}
	r.run <- nil // for the cleanup's drain
	if n := len(emb.Calls()); n != 1 {
		t.Errorf("%d Embed calls, want only the running job's", n)
	}
	if r.met.get("nak shutdown") != 3 {
		t.Errorf("metrics %v", r.met)
	}
	select {
	case <-r.c.Done():
	default:
		t.Error("Closed not closed after Run returned")
	}
}

// TestDrainGrace: when the grace ends first, the running Embed call is
// cancelled and its jobs NAKed; Drain returns the context's error.
func TestDrainGrace(t *testing.T) {
	emb := &fakeEmb{block: make(chan struct{}), started: make(chan struct{}, 1)}
	r := newRig(t, Config{}, emb, nil)
	d, m := delivery(t, schema.NewJob("stuck", "a"), schema.EncodingJSON, 1)
	if err := r.c.Submit(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	<-emb.started
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := r.c.Drain(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Drain: %v, want DeadlineExceeded", err)
	}
	if got := m.Calls(); !slices.Equal(got, []string{"nak"}) {
		t.Errorf("calls %v, want [nak] without delay", got)
	}
}

// TestRunCancel: cancelling Run's context is the hard stop: everything held
// is NAKed and Run returns the context's error.
func TestRunCancel(t *testing.T) {
	emb := &fakeEmb{block: make(chan struct{}), started: make(chan struct{}, 1)}
	c, err := New(Config{NakBackoff: Backoff{Jitter: -1}}, emb, &fakePub{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := make(chan error, 1)
	go func() { run <- c.Run(ctx) }()
	var msgs []*fakeMsg
	for _, id := range []string{"running", "queued"} {
		d, m := delivery(t, schema.NewJob(id, "a "+id), schema.EncodingJSON, 1)
		if err := c.Submit(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
		if id == "running" {
			<-emb.started
		}
	}
	cancel()
	if err := <-run; !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v, want Canceled", err)
	}
	for _, m := range msgs {
		if got := m.Calls(); !slices.Equal(got, []string{"nak"}) {
			t.Errorf("calls %v, want [nak]", got)
		}
	}
	if s := c.Stats(); s.Held != 0 || s.Waiting != 0 {
		t.Errorf("stats after stop %+v", s)
	}
	if err := c.Run(context.Background()); !errors.Is(err, ErrRunning) {
		t.Errorf("second Run: %v", err)
	}
}

// TestBudget: Submit blocks while the engine has no room for a bulk job
// and returns once the engine admitted it (the job holds its room until
// it is settled); a request never blocks Submit: it waits in the
// engine's queue, and the engine's refusal (overloaded) is answered,
// retriable; a blocked Submit whose context ends takes its job out of the
// engine's queue and NAKs it. Under synctest, "still blocked" is a fact
// (synctest.Wait), not a 20ms guess.
func TestBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		emb := &fakeEmb{block: make(chan struct{}), started: make(chan struct{}, 10), slots: make(chan struct{}, 2),
			callErr: func(texts []engine.Text) error {
				if texts[0].Text == "refused" {
					return schema.Errorf(schema.CodeOverloaded, "interactive queue full")
				}
				return nil
			}}
		r := newRig(t, Config{}, emb, nil)
		// Texts of their own: an identical text in flight would be
		// computed once, for both jobs (flight.go).
		text := "aaaaaaaaa"
		var msgs []*fakeMsg
		for _, id := range []string{"a", "b"} {
			d, m := delivery(t, schema.NewJob(id, text+id), schema.EncodingJSON, 1)
			if err := r.c.Submit(context.Background(), d); err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, m)
		}
		<-emb.started
		<-emb.started
		if s := r.c.Stats(); s.Held != 2 || s.Waiting != 0 {
			t.Errorf("stats %+v", s)
		}

		first, firstMsg := delivery(t, schema.NewJob("first-req", text+"first-req"), schema.EncodingJSON, 1)
		var firstAnswer []byte
		if err := r.c.Submit(context.Background(), asRequest(first, func(_ map[string][]string, data []byte) error { firstAnswer = data; return nil })); err != nil {
			t.Errorf("request Submit with the engine full: %v, want it queued", err)
		}
		synctest.Wait()
		if s := r.c.Stats(); s.Held != 2 || s.Waiting != 1 {
			t.Errorf("stats %+v, want the request waiting", s)
		}
		req, reqMsg := delivery(t, schema.NewJob("req", "refused"), schema.EncodingJSON, 1)
		var answer []byte
		if err := r.c.Submit(context.Background(), asRequest(req, func(_ map[string][]string, data []byte) error { answer = data; return nil })); err != nil {
			t.Errorf("request Submit: %v, want nil (answered by the loop)", err)
		}
		reqMsg.wait(t)
		if res, err := schema.DecodeResult(answer, schema.EncodingJSON); err != nil || res.Error == nil || res.Error.Code != schema.CodeOverloaded || !res.Error.Retriable {
			t.Errorf("request answer %+v, %v", res, err)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		gaveUp, gm := delivery(t, schema.NewJob("gave-up", text+"gave-up"), schema.EncodingJSON, 1)
		if err := r.c.Submit(ctx, gaveUp); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Submit with an ended context: %v", err)
		}
		if got := gm.wait(t); !slices.Equal(got, []string{"nak"}) {
			t.Errorf("calls %v, want [nak]", got)
		}

		waiting, wm := delivery(t, schema.NewJob("waiting", text+"waiting"), schema.EncodingJSON, 1)
		submitted := make(chan error, 1)
		go func() { submitted <- r.c.Submit(context.Background(), waiting) }()
		synctest.Wait()
		select {
		case err := <-submitted:
			t.Fatalf("Submit returned %v with the engine full", err)
		default:
		}
		close(emb.block)
		if err := <-submitted; err != nil {
			t.Fatal(err)
		}
		for _, m := range append(msgs, wm, firstMsg) {
			if got := m.wait(t); !slices.Equal(got, []string{"ack"}) {
				t.Errorf("calls %v, want [ack]", got)
			}
		}
		if res, err := schema.DecodeResult(firstAnswer, schema.EncodingJSON); err != nil || res.Error != nil {
			t.Errorf("request answer %+v, %v; want vectors", res, err)
		}
	})
}

// TestInProgressWhileWaiting: a delivery blocked in Submit by a full budget
// is kept alive too (synctest's clock).
func TestInProgressWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		emb := &fakeEmb{block: make(chan struct{}), started: make(chan struct{}, 10), slots: make(chan struct{}, 1)}
		r := newRig(t, Config{Delivery: DeliveryLimits{AckWait: 8 * time.Second}, InProgressFraction: 0.25}, emb, nil)
		first, fm := delivery(t, schema.NewJob("first", "aaaaaaaaa"), schema.EncodingJSON, 1)
		if err := r.c.Submit(context.Background(), first); err != nil {
			t.Fatal(err)
		}
		<-emb.started
		blocked, bm := delivery(t, schema.NewJob("blocked", "aaaaaaaaa"), schema.EncodingJSON, 1)
		submitted := make(chan error, 1)
		go func() { submitted <- r.c.Submit(context.Background(), blocked) }()
		waitFor(t, func() bool { return slices.Contains(bm.Calls(), "progress") })
		close(emb.block)
		if err := <-submitted; err != nil {
			t.Fatal(err)
		}
		for _, m := range []*fakeMsg{fm, bm} {
			if got := m.wait(t); !slices.Equal(got, []string{"ack"}) {
				t.Errorf("calls %v, want [ack]", got)
			}
		}
	})
}

// TestStress submits a mix of good, bad, refused, expired, unpublishable
// and request-reply jobs from several goroutines, then drains: every
// delivery is settled exactly once and the budget returns to zero.
func TestStress(t *testing.T) {
	emb := &fakeEmb{refuse: func(text string) *schema.Error {
		if strings.HasPrefix(text, "cold") {
			return schema.Errorf(schema.CodeShapeNotWarmed, "x")
		}
		return nil
	}}
	pub := &fakePub{fail: func(subject string) error {
		if subject == "broken" {
			return errInjected
		}
		return nil
	}}
	r := newRig(t, Config{}, emb, pub)
	past := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	const workers, perWorker = 4, 150
	msgs := make([][]*fakeMsg, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				id := fmt.Sprintf("w%d-%d", w, i)
				j := schema.NewJob(id, "text "+id, "more "+id)
				j.Reply = "ok"
				switch i % 6 {
				case 1:
					j.Texts = nil // empty_job
				case 2:
					j.Texts[1] = "cold " + id
				case 3:
					j.Deadline = past
				case 4:
					j.Reply = "broken"
				}
				d, m := delivery(t, j, schema.Encoding(i%2), 1)
				var del Delivery = d
				if i%6 == 5 {
					del = asRequest(d, func(map[string][]string, []byte) error { return nil })
				}
				_ = r.c.Submit(context.Background(), del) // ErrOverloaded is settled too
				msgs[w] = append(msgs[w], m)
			}
		})
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.c.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ms := range msgs {
		for _, m := range ms {
			m.mu.Lock()
			n, calls := m.settled, slices.Clone(m.calls)
			m.mu.Unlock()
			if n != 1 {
				t.Fatalf("a message settled %d times: %v", n, calls)
			}
		}
	}
	if s := r.c.Stats(); s.Held != 0 || s.Waiting != 0 || s.Jobs != workers*perWorker {
		t.Errorf("stats after drain %+v", s)
	}
}
