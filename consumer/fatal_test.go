package consumer

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/schema"
)

// TestFatalEngineErrorNaksWithoutDelay: a call that fails with the
// engine's fatal error gives its jobs back at once (NAK without delay), as
// at shutdown, for the peers to take: this process is about to exit.
func TestFatalEngineErrorNaksWithoutDelay(t *testing.T) {
	emb := &fakeEmb{callErr: func([]engine.Text) error {
		return fmt.Errorf("%w: failed to build engine", engine.ErrFatal)
	}}
	r := newRig(t, Config{MaxDeliver: 5}, emb, nil)
	var msgs []*fakeMsg
	for i := range 3 {
		d, m := delivery(t, schema.NewJob(fmt.Sprint(i), "text"), schema.EncodingMsgpack, 2)
		if err := r.c.Submit(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	for i, m := range msgs {
		if got := m.wait(t); !slices.Equal(got, []string{"nak"}) {
			t.Errorf("job %d: calls %v, want a NAK without delay", i, got)
		}
	}
}
