package consumer

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/schema"
)

// TestRequestReply: a request is answered through Respond, retriable
// refusals at once (there is no redelivery), and its Embed call runs in
// the engine's interactive class while a JetStream job's runs in bulk.
func TestRequestReply(t *testing.T) {
	emb := &fakeEmb{refuse: func(text string) *schema.Error {
		if text == "cold" {
			return schema.Errorf(schema.CodeShapeNotWarmed, "x")
		}
		return nil
	}}
	r := newRig(t, Config{}, emb, nil)
	type answer struct {
		header map[string][]string
		data   []byte
	}
	var mu sync.Mutex
	answers := map[string]answer{}
	var msgs []*fakeMsg
	for _, id := range []string{"warm", "cold"} {
		j := schema.NewJob(id, id)
		j.Reply = "ignored.for.requests"
		d, m := delivery(t, j, schema.EncodingJSON, 1)
		d.Respond = func(h map[string][]string, data []byte) error {
			mu.Lock()
			defer mu.Unlock()
			answers[id] = answer{h, data}
			return nil
		}
		if err := r.c.Submit(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	bulk := schema.NewJob("bulk", "from the stream")
	bulk.Reply = "r"
	d, bm := delivery(t, bulk, schema.EncodingMsgpack, 1)
	if err := r.c.Submit(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	for _, m := range append(msgs, bm) {
		if got := m.wait(t); !slices.Equal(got, []string{"ack"}) {
			t.Errorf("calls %v, want [ack]", got)
		}
	}
	emb.mu.Lock()
	for i, c := range emb.calls {
		if isBulk := c[0].Text == "from the stream"; engine.IsInteractive(emb.ctxs[i]) == isBulk {
			t.Errorf("call %v: interactive %v, want %v", c, !isBulk, isBulk)
		}
	}
	emb.mu.Unlock()
	if n := len(r.pub.Results()); n != 1 {
		t.Errorf("%d results published, want only the bulk job's", n)
	}
	mu.Lock()
	defer mu.Unlock()
	warm, err := schema.DecodeResult(answers["warm"].data, schema.EncodingJSON)
	if err != nil || warm.Error != nil || len(warm.Items) != 1 || warm.Items[0].Dense[0] != 4 {
		t.Errorf("warm answer %+v, %v", warm, err)
	}
	cold, err := schema.DecodeResult(answers["cold"].data, schema.EncodingJSON)
	if err != nil || cold.Error == nil || cold.Error.Code != schema.CodeShapeNotWarmed || !cold.Error.Retriable {
		t.Errorf("cold answer %+v, %v", cold, err)
	}
	if h := answers["cold"].header[schema.HeaderErrorCode]; !slices.Equal(h, []string{"shape_not_warmed"}) {
		t.Errorf("cold answer header %v", h)
	}
}

// TestPublisherPanic: a panic while settling gives the message back (NAK
// with backoff) instead of crashing or leaving it to expire.
func TestPublisherPanic(t *testing.T) {
	pub := &fakePub{fail: func(string) error { panic("publisher bug") }}
	r := newRig(t, Config{}, nil, pub)
	j := schema.NewJob("j", "text")
	j.Reply = "r"
	d, m := delivery(t, j, schema.EncodingJSON, 2)
	if err := r.c.Submit(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if got := m.wait(t); !slices.Equal(got, []string{"nak+delay"}) || m.delays[0] != 200*time.Millisecond {
		t.Errorf("calls %v delays %v, want one NAK of 200ms", got, m.delays)
	}
	waitFor(t, func() bool { return r.c.Stats().Held == 0 })
	if !strings.Contains(r.log.String(), "settling a job panicked") {
		t.Error("the panic was not logged")
	}
}

// TestEmbedderContract: an Embedder that breaks its contract (a wrong
// number of embeddings, a non-schema error) is an internal failure: NAKed
// with backoff, never a crash or a result with missing items.
func TestEmbedderContract(t *testing.T) {
	for name, fail := range map[string]func([]engine.Text) error{
		"short": nil,
		"error": func([]engine.Text) error { return errInjected },
	} {
		t.Run(name, func(t *testing.T) {
			emb := &fakeEmb{callErr: fail}
			var e engine.Embedder = emb
			if fail == nil {
				e = shortEmb{emb}
			}
			r := newRigWith(t, Config{}, e, &fakePub{})
			j := schema.NewJob("j", "a", "b")
			j.Reply = "r"
			if got := r.submit(t, j, schema.EncodingJSON); !slices.Equal(got, []string{"nak+delay"}) {
				t.Errorf("calls %v, want [nak+delay]", got)
			}
			if r.met.get("nak internal") != 1 || len(r.pub.Results()) != 0 {
				t.Errorf("metrics %v, %d results", r.met, len(r.pub.Results()))
			}
		})
	}
}

// shortEmb drops the last embedding.
type shortEmb struct{ *fakeEmb }

func (s shortEmb) Embed(ctx context.Context, texts []engine.Text) ([]engine.Embedding, engine.CallReport, error) {
	embs, rep, err := s.fakeEmb.Embed(ctx, texts)
	return embs[:len(embs)-1], rep, err
}

// TestAckError: a failed ACK is logged, not retried or panicked on.
func TestAckError(t *testing.T) {
	r := newRig(t, Config{}, nil, nil)
	d, m := delivery(t, schema.NewJob("j", "a"), schema.EncodingJSON, 1)
	m.ackErr = errInjected
	if err := r.c.Submit(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if got := m.wait(t); !slices.Equal(got, []string{"ack"}) {
		t.Errorf("calls %v", got)
	}
	waitFor(t, func() bool { return strings.Contains(r.log.String(), "message not settled") })
}

// TestRequestAnswerLost: an answer that cannot be sent (the connection it
// was owed on is gone) is counted and logged, never dead-lettered, even
// when the consumer's MaxDeliver is 1: a request has no redelivery, and
// its caller, unanswered, asks again.
func TestRequestAnswerLost(t *testing.T) {
	r := newRig(t, Config{Delivery: DeliveryLimits{MaxDeliver: 1}}, nil, nil)
	j := schema.NewJob("lost", "text")
	d, m := delivery(t, j, schema.EncodingJSON, 1)
	d.Respond = func(map[string][]string, []byte) error { return errInjected }
	if err := r.c.Submit(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	m.wait(t)
	if dlq := r.pub.DLQ(); len(dlq) != 0 {
		t.Errorf("dead letters %+v, want none", dlq)
	}
	if r.met.get("nak publish_failed") != 1 {
		t.Errorf("metrics %v", r.met)
	}
}
