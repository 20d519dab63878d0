package natstest

import (
	"context"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// StreamMsgs returns every message stored in stream (of subjects matching
// filter, when it is not empty), oldest first.
func StreamMsgs(t testing.TB, js natsjs.JetStream, stream, filter string) []natsjs.Msg {
	t.Helper()
	if StreamCount(t, js, stream) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := natsjs.OrderedConsumerConfig{}
	if filter != "" {
		cfg.FilterSubjects = []string{filter}
	}
	c, err := js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out []natsjs.Msg
	for {
		b, err := c.FetchNoWait(256)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range b.Messages() {
			out = append(out, m)
			n++
		}
		if n == 0 {
			return out
		}
	}
}

// StreamCount is how many messages stream holds now.
func StreamCount(t testing.TB, js natsjs.JetStream, stream string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}
