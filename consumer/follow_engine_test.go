//go:build cgo

package consumer_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/ort/enginetest"
	"github.com/jetembed/jetembed/internal/testkit"
	"github.com/jetembed/jetembed/schema"
)

// TestRealEngineRequestNotBehindQueuedTwin: a request (interactive, its
// own budget) whose text a queued bulk job of the tenant holds while that
// job still waits for room in the bulk budget is answered from the
// interactive class at once: it does not follow the bulk job's text and
// wait out the bulk queue (as long as the bulk job's deadline, or for
// ever), past its own MaxWait and deadline.
func TestRealEngineRequestNotBehindQueuedTwin(t *testing.T) {
	e, c, _, gate := followRig(t)

	stored := func(id, text string) (*consumer.Stored, ackMsg) {
		j := schema.NewJob(id, text)
		j.Reply = "embed.results.t1.x"
		return storedJob(t, "embed.jobs.t1", j, schema.EncodingMsgpack)
	}
	// The bulk budget is full: a job of the model's longest text runs,
	// held by the session.
	d, _ := stored("full", strings.Repeat("long text ", 20))
	if err := c.Submit(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	<-gate.first
	// A bulk job of the tenant waits for room, its text on the board.
	const shared = "a text a bulk job and a request both hold"
	d, _ = stored("queued", shared)
	go func() { _ = c.Submit(context.Background(), d) }()
	testkit.CheckFor(t, 10*time.Second, time.Millisecond, func() error {
		if w := e.Stats().Waiting; w != 1 {
			return fmt.Errorf("%d calls wait for room, want the queued bulk job's", w)
		}
		return nil
	})

	answers := make(chan *schema.Result, 1)
	j := schema.NewJob("req", shared)
	if err := c.Submit(context.Background(), &consumer.Request{
		Arrival: consumer.Arrival{Header: map[string][]string{}, Received: time.Now()},
		Tenant:  "t1", Job: j, Local: true,
		Answer: func(res *schema.Result) (map[string][]string, []byte) { answers <- res; return nil, nil },
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-answers:
		if res.Error != nil || len(res.Items) != 1 || res.Items[0].Error != nil || len(res.Items[0].Dense) == 0 {
			t.Errorf("request's result %+v", res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the request was not answered while the bulk job holding its text waited for room: it followed that job")
	}
}

// followRig is the tiny model's real engine on two sessions whose first
// run is held by gate (open it with close(gate.open); the test's clean-up
// does), with a bulk budget of 24 tokens: one job of the model's longest
// text fills it. c is a consumer on it, run until the test ends, its
// results in pub.
func followRig(t *testing.T) (*engine.Engine, *consumer.Loop, *results, *firstRunGate) {
	gate := &firstRunGate{open: make(chan struct{}), first: make(chan struct{})}
	e := enginetest.OpenWith(t, engine.Config{Sessions: 2, MaxTokens: 24, AdmissionTokens: 24}, func(r engine.Runner) engine.Runner {
		return &firstRunGated{Runner: r, g: gate}
	})
	open := sync.OnceFunc(func() { close(gate.open) })
	t.Cleanup(open) // before the engine closes: it waits for the held run
	pub := &results{data: map[string][]byte{}}
	c, err := consumer.New(consumer.Config{}, e, pub)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Run(context.Background()) }()
	t.Cleanup(func() { open(); _ = c.Drain(context.Background()) })
	return e, c, pub, gate
}

// firstRunGate holds the first run of any session until open is closed
// (first is closed when it starts); the other runs, on the other
// sessions, go on meanwhile.
type firstRunGate struct {
	open, first chan struct{}
	taken       atomic.Bool
}

type firstRunGated struct {
	engine.Runner
	g *firstRunGate
}

func (r *firstRunGated) Run(ctx context.Context, in engine.RunInput) (engine.RunOutput, error) {
	if r.g.taken.CompareAndSwap(false, true) {
		close(r.g.first)
		<-r.g.open
	}
	return r.Runner.Run(ctx, in)
}

// TestRealEngineFollowerKeepsItsDeadline: a bulk job with a deadline
// whose text a queued bulk job without one holds (that job waits for room
// in the bulk budget) is answered at its own deadline, deadline_exceeded:
// it does not wait out the leader's queue, past its deadline.
func TestRealEngineFollowerKeepsItsDeadline(t *testing.T) {
	e, c, pub, gate := followRig(t)

	stored := func(id, text, deadline string) (*consumer.Stored, ackMsg) {
		j := schema.NewJob(id, text)
		j.Reply = "embed.results.t1." + id
		j.Deadline = deadline
		return storedJob(t, "embed.jobs.t1", j, schema.EncodingMsgpack)
	}
	d, _ := stored("full", strings.Repeat("long text ", 20), "")
	if err := c.Submit(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	<-gate.first
	const shared = "a text two bulk jobs hold"
	d, _ = stored("leader", shared, "")
	go func() { _ = c.Submit(context.Background(), d) }()
	testkit.CheckFor(t, 10*time.Second, time.Millisecond, func() error {
		if w := e.Stats().Waiting; w != 1 {
			return fmt.Errorf("%d calls wait for room, want the leader's", w)
		}
		return nil
	})
	deadline := time.Now().Add(500 * time.Millisecond)
	d, m := stored("follower", shared, deadline.UTC().Format(time.RFC3339Nano))
	go func() { _ = c.Submit(context.Background(), d) }()
	select {
	case verdict := <-m.done:
		t.Logf("follower settled %s %v after its deadline", verdict, time.Since(deadline).Round(time.Millisecond))
	case <-time.After(20 * time.Second):
		t.Fatal("the follower was not settled 20 s after its deadline: it waited out the leader's queue")
	}
	pub.mu.Lock()
	data := pub.data["follower"]
	pub.mu.Unlock()
	res, err := schema.DecodeResult(data, schema.EncodingMsgpack)
	if err != nil {
		t.Fatalf("follower's result: %v", err)
	}
	code := schema.Code("")
	switch {
	case res.Error != nil:
		code = res.Error.Code
	case len(res.Items) == 1 && res.Items[0].Error != nil:
		code = res.Items[0].Error.Code
	}
	if code != schema.CodeDeadlineExceeded {
		t.Errorf("follower's result %+v: want deadline_exceeded", res)
	}
}
