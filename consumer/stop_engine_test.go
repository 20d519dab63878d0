//go:build cgo

package consumer_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/ort/enginetest"
	"github.com/jetembed/jetembed/schema"
)

// TestRealEngineHardStopNaks: cancelling Run's context while the real
// engine runs a job's text (and another job of the tenant follows that
// text) is the hard stop: both jobs are NAKed for a peer. The engine
// answers the texts of a call whose context ended deadline_exceeded
// item by item, not as the call's error (the fake embedder's
// ctx.Err()); that is this process stopping, not the producer's
// deadline, and must not be ACKed as a final result with per-item
// deadline_exceeded, to the leader or to the job that followed it.
func TestRealEngineHardStopNaks(t *testing.T) {
	gate := &gatedRunner{open: make(chan struct{}), first: make(chan int, 1)}
	e := enginetest.OpenWith(t, engine.Config{Sessions: 1, MaxTokens: 24}, func(r engine.Runner) engine.Runner {
		gate.Runner = r
		return gate
	})
	open := sync.OnceFunc(func() { close(gate.open) })
	t.Cleanup(open) // before the engine closes: it waits for the held run
	pub := &results{data: map[string][]byte{}}
	c, err := consumer.New(consumer.Config{}, e, pub)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	run := make(chan error, 1)
	go func() { run <- c.Run(ctx) }()

	var msgs []ackMsg
	for _, id := range []string{"leader", "follower"} {
		j := schema.NewJob(id, "a text both jobs hold")
		j.Reply = "embed.results.stop.x"
		d, m := storedJob(t, "embed.jobs.stop", j, schema.EncodingMsgpack)
		if err := c.Submit(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		if id == "leader" {
			<-gate.first // the session holds the leader's text
		}
		msgs = append(msgs, m)
	}
	cancel()
	if err := <-run; !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v, want Canceled", err)
	}
	for k, m := range msgs {
		if got := <-m.done; got != "nak" {
			pub.mu.Lock()
			data := pub.data[[]string{"leader", "follower"}[k]]
			pub.mu.Unlock()
			res, _ := schema.DecodeResult(data, schema.EncodingMsgpack)
			var items []*schema.Error
			if res != nil {
				for _, it := range res.Items {
					items = append(items, it.Error)
				}
			}
			t.Errorf("job %d at the hard stop: %s (item errors %v), want nak", k, got, items)
		}
	}
	open()
}
