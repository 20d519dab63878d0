package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/schema"
)

// request is a request-reply delivery whose answer is kept.
type request struct {
	d      Delivery
	m      *fakeMsg
	answer chan []byte
}

func newRequest(t *testing.T, id string, texts ...string) *request {
	t.Helper()
	j := schema.NewJob(id, texts...)
	d, m := delivery(t, j, schema.EncodingJSON, 1)
	r := &request{d: d, m: m, answer: make(chan []byte, 1)}
	d.Respond = func(_ map[string][]string, data []byte) error { r.answer <- data; return nil }
	r.d = d
	return r
}

func (r *request) result(t *testing.T) *schema.Result {
	t.Helper()
	select {
	case data := <-r.answer:
		res, err := schema.DecodeResult(data, schema.EncodingJSON)
		if err != nil {
			t.Fatal(err)
		}
		return res
	case <-time.After(time.Minute):
		t.Fatal("no answer")
		return nil
	}
}

// TestRequestQueueOrderAndExpiry: requests that find the interactive
// budget full wait first come first served (a small one does not pass a
// large one waiting), and one that cannot get room before its deadline is
// answered then, deadline_exceeded, not left to its caller's timeout.
func TestRequestQueueOrderAndExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		emb := &fakeEmb{block: make(chan struct{}), started: make(chan struct{}, 10)}
		// 9 bytes estimate 5 tokens, 27 bytes 11: the budget holds 12.
		c := newRig(t, Config{InFlightTokens: 20, InteractiveTokens: 12, RequestQueueTokens: 100}, emb, nil).c
		small, big := strings.Repeat("a", 9), strings.Repeat("b", 27)
		running := newRequest(t, "running", big)
		if err := c.Submit(context.Background(), running.d); err != nil {
			t.Fatal(err)
		}
		<-emb.started
		large := newRequest(t, "large", big)
		little := newRequest(t, "little", small)
		for _, r := range []*request{large, little} {
			if err := c.Submit(context.Background(), r.d); err != nil {
				t.Fatalf("%s: %v, want it queued", r.d.Header, err)
			}
		}
		synctest.Wait()
		if n := len(emb.calls); n != 1 {
			t.Fatalf("%d calls with the budget full; the little request passed the large one", n)
		}

		// A request whose deadline comes before room does is answered at
		// its deadline.
		j := schema.NewJob("late", small)
		j.Deadline = time.Now().Add(2 * time.Second).UTC().Format(time.RFC3339Nano)
		d, m := delivery(t, j, schema.EncodingJSON, 1)
		late := &request{d: d, m: m, answer: make(chan []byte, 1)}
		late.d.Respond = func(_ map[string][]string, data []byte) error { late.answer <- data; return nil }
		start := time.Now()
		if err := c.Submit(context.Background(), late.d); err != nil {
			t.Fatal(err)
		}
		res := late.result(t)
		if res.Error == nil || res.Error.Code != schema.CodeDeadlineExceeded {
			t.Errorf("late request: %+v", res)
		}
		if waited := time.Since(start); waited < 2*time.Second || waited > 3*time.Second {
			t.Errorf("answered after %s, want at its deadline (2 s)", waited)
		}

		close(emb.block)
		for _, r := range []*request{running, large, little} {
			if res := r.result(t); res.Error != nil {
				t.Errorf("%v", res.Error)
			}
		}
		if got := emb.calls[1][0].Text; got != big {
			t.Errorf("second call embedded %q, want the large request first", got)
		}
	})
}

// TestRequestQueueFullAndDrain: beyond the queue's tokens a request is
// refused overloaded at once; Drain answers the waiting ones
// engine_unavailable.
func TestRequestQueueFullAndDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		emb := &fakeEmb{block: make(chan struct{}), started: make(chan struct{}, 10)}
		r := newRig(t, Config{InFlightTokens: 20, InteractiveTokens: 5, RequestQueueTokens: 10}, emb, nil)
		c := r.c
		text := strings.Repeat("a", 9) // 5 tokens
		var reqs []*request
		for _, id := range []string{"run", "wait1", "wait2"} {
			q := newRequest(t, id, text)
			if err := c.Submit(context.Background(), q.d); err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			reqs = append(reqs, q)
		}
		<-emb.started
		over := newRequest(t, "over", text)
		if err := c.Submit(context.Background(), over.d); !errors.Is(err, ErrOverloaded) {
			t.Errorf("a request beyond the queue: %v, want ErrOverloaded", err)
		}
		if res := over.result(t); res.Error == nil || res.Error.Code != schema.CodeOverloaded || !res.Error.Retriable {
			t.Errorf("answer %+v", res)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		drained := make(chan error, 1)
		go func() { drained <- c.Drain(ctx) }()
		for _, q := range reqs[1:] {
			if res := q.result(t); res.Error == nil || res.Error.Code != schema.CodeEngineUnavailable {
				t.Errorf("a waiting request at drain: %+v", res)
			}
		}
		close(emb.block)
		if res := reqs[0].result(t); res.Error != nil {
			t.Errorf("the running request: %v", res.Error)
		}
		if err := <-drained; err != nil {
			t.Error(err)
		}
	})
}

// TestRequestRefusedByDrainRate: once the drain rate is measured, a
// request that could not start before its deadline is refused overloaded
// at once, saying when to retry; one with time enough waits.
func TestRequestRefusedByDrainRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		emb := &fakeEmb{callErr: func([]engine.Text) error { time.Sleep(time.Second); return nil }}
		c := newRig(t, Config{InFlightTokens: 20, InteractiveTokens: 5, RequestQueueTokens: 100}, emb, nil).c
		text := strings.Repeat("a", 9) // 5 tokens: one request at a time, 1 s each
		withDeadline := func(id string, d time.Duration) *request {
			j := schema.NewJob(id, text)
			j.Deadline = time.Now().Add(d).UTC().Format(time.RFC3339Nano)
			dl, m := delivery(t, j, schema.EncodingJSON, 1)
			r := &request{d: dl, m: m, answer: make(chan []byte, 1)}
			r.d.Respond = func(_ map[string][]string, data []byte) error { r.answer <- data; return nil }
			return r
		}
		var warm []*request
		for i := range 4 {
			r := withDeadline(fmt.Sprint("warm", i), time.Minute)
			if err := c.Submit(context.Background(), r.d); err != nil {
				t.Fatal(err)
			}
			warm = append(warm, r)
		}
		for _, r := range warm {
			if res := r.result(t); res.Error != nil {
				t.Fatal(res.Error)
			}
		}
		// About 5 tokens a second now. One runs and three wait: 20 tokens
		// ahead of a new request, about 4 s.
		var busy []*request
		for i := range 4 {
			r := withDeadline(fmt.Sprint("busy", i), time.Minute)
			if err := c.Submit(context.Background(), r.d); err != nil {
				t.Fatal(err)
			}
			busy = append(busy, r)
		}
		hurried := withDeadline("hurried", time.Second)
		if err := c.Submit(context.Background(), hurried.d); !errors.Is(err, ErrOverloaded) {
			t.Errorf("a request that cannot start before its deadline: %v, want ErrOverloaded", err)
		}
		if res := hurried.result(t); res.Error == nil || res.Error.Code != schema.CodeOverloaded || !strings.Contains(res.Error.Message, "retry in about") {
			t.Errorf("answer %+v", res.Error)
		}
		patient := withDeadline("patient", 30*time.Second)
		if err := c.Submit(context.Background(), patient.d); err != nil {
			t.Errorf("a request with time enough: %v", err)
		}
		for _, r := range append(busy, patient) {
			if res := r.result(t); res.Error != nil {
				t.Error(res.Error)
			}
		}
	})
}

// TestRequestQueueFairByTenant: one tenant's requests fill the waiting
// queue; another tenant's request still gets in (the first tenant's
// newest is pushed out, answered overloaded, since it holds more than its
// share) and is taken in before the first tenant's older ones: tenants
// take turns, so a flood never keeps anyone else's request out.
func TestRequestQueueFairByTenant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		emb := &fakeEmb{block: make(chan struct{}), started: make(chan struct{}, 16)}
		// 9 bytes estimate 5 tokens: one request holds the budget, four
		// fill the queue.
		c := newRig(t, Config{InFlightTokens: 20, InteractiveTokens: 5, RequestQueueTokens: 20}, emb, nil).c
		text := func(tenant string, i int) string { return fmt.Sprintf("%s-%07d", tenant, i) }
		of := func(tenant string, i int) *request {
			r := newRequest(t, fmt.Sprintf("%s%d", tenant, i), text(tenant, i))
			r.d.Tenant = tenant
			return r
		}
		var flood []*request
		for i := range 5 {
			r := of("a", i)
			if err := c.Submit(context.Background(), r.d); err != nil {
				t.Fatalf("a's request %d: %v", i, err)
			}
			flood = append(flood, r)
			if i == 0 {
				<-emb.started
			}
		}
		// The queue is full: a's next is refused (a is at its share)...
		extra := of("a", 5)
		if err := c.Submit(context.Background(), extra.d); !errors.Is(err, ErrOverloaded) {
			t.Fatalf("a's request over a full queue: %v", err)
		}
		if res := extra.result(t); res.Error == nil || res.Error.Code != schema.CodeOverloaded {
			t.Errorf("a's request over a full queue answered %+v", res)
		}
		// ...but b's is taken, and a's newest waiting one pushed out.
		b := of("b", 0)
		if err := c.Submit(context.Background(), b.d); err != nil {
			t.Fatalf("b's request while a fills the queue: %v", err)
		}
		if res := flood[4].result(t); res.Error == nil || res.Error.Code != schema.CodeOverloaded {
			t.Errorf("a's newest waiting request after b's came: %+v, want pushed out (overloaded)", res)
		}
		close(emb.block)
		if res := b.result(t); res.Error != nil {
			t.Errorf("b's request: %v", res.Error)
		}
		for i, r := range flood[:4] {
			if res := r.result(t); res.Error != nil {
				t.Errorf("a's request %d: %v", i, res.Error)
			}
		}
		if got := emb.calls[1][0].Text; got != text("b", 0) {
			t.Errorf("the call after a's first ran %q, want b's request (its turn comes before a's next)", got)
		}
	})
}

// TestRequestDeadlineOutlastsRequestWait: a request that carries a deadline
// waits for interactive room until that deadline, not RequestWait (which is
// for requests without one): the client sends its context's deadline, so a
// caller who gave 60 s is not answered overloaded after 10 (seen as
// "waited 10.001s for interactive room" under a loaded machine).
func TestRequestDeadlineOutlastsRequestWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		emb := &fakeEmb{block: make(chan struct{}), started: make(chan struct{}, 10)}
		c := newRig(t, Config{InFlightTokens: 20, InteractiveTokens: 12, RequestQueueTokens: 100, RequestWait: 10 * time.Second}, emb, nil).c
		big := strings.Repeat("b", 27)
		running := newRequest(t, "running", big)
		if err := c.Submit(context.Background(), running.d); err != nil {
			t.Fatal(err)
		}
		<-emb.started
		j := schema.NewJob("patient", big)
		j.Deadline = time.Now().Add(60 * time.Second).UTC().Format(time.RFC3339Nano)
		d, m := delivery(t, j, schema.EncodingJSON, 1)
		patient := &request{d: d, m: m, answer: make(chan []byte, 1)}
		patient.d.Respond = func(_ map[string][]string, data []byte) error { patient.answer <- data; return nil }
		if err := c.Submit(context.Background(), patient.d); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Second) // past RequestWait, before the deadline
		synctest.Wait()
		select {
		case data := <-patient.answer:
			t.Fatalf("answered before room or its deadline: %s", data)
		default:
		}
		close(emb.block)
		for _, r := range []*request{running, patient} {
			if res := r.result(t); res.Error != nil {
				t.Errorf("%s: %v", res.ID, res.Error)
			}
		}
	})
}
