package consumer

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/schema"
)

// TestFatalEngineErrorHandsJobsBack: a call that fails with the engine's
// fatal error gives its jobs back for the peers to take (NAK with the short
// hand-back delay, not the retry backoff), as at shutdown: this process is
// about to exit.
func TestFatalEngineErrorHandsJobsBack(t *testing.T) {
	emb := &fakeEmb{callErr: func([]engine.Text) error {
		return fmt.Errorf("%w: failed to build engine", engine.ErrFatal)
	}}
	r := newRig(t, Config{Delivery: DeliveryLimits{MaxDeliver: 5}}, emb, nil)
	var msgs []*fakeMsg
	for i := range 3 {
		d, m := delivery(t, schema.NewJob(fmt.Sprint(i), "text"), schema.EncodingMsgpack, 2)
		if err := r.c.Submit(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	for i, m := range msgs {
		if got := m.wait(t); !slices.Equal(got, []string{"nak+delay"}) || m.delays[0] != handBackDelay {
			t.Errorf("job %d: calls %v, delays %v, want one NAK after %v", i, got, m.delays, handBackDelay)
		}
	}
}
