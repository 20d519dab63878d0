package jetstream_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// consumerInfo returns the durable consumer's info.
func consumerInfo(t testing.TB, srv *server) *natsjs.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := srv.js.Consumer(ctx, srv.cfg.Jobs.Name, srv.cfg.Consumer.Name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// deliveries records the highest delivery count seen per job id (from the
// body; the header's Nats-Msg-Id where the body does not decode).
type deliveries struct {
	mu  sync.Mutex
	max map[string]uint64
}

func (d *deliveries) wrap(c *consumer.Loop) jetstream.Sink {
	d.max = map[string]uint64{}
	return sinkFunc(func(ctx context.Context, del consumer.Delivery) error {
		dl, ok := del.(*consumer.Stored)
		if !ok {
			return c.Submit(ctx, del)
		}
		id := ""
		if h := dl.Header[schema.HeaderMsgID]; len(h) > 0 {
			id = h[0]
		}
		var ct string
		if h := dl.Header[schema.HeaderContentType]; len(h) > 0 {
			ct = h[0]
		}
		if j, err := schema.DecodeJob(dl.Data, schema.EncodingFor(ct)); err == nil && j.ID != "" {
			id = j.ID
		}
		if id != "" {
			d.mu.Lock()
			d.max[id] = max(d.max[id], dl.NumDelivered)
			d.mu.Unlock()
		}
		return c.Submit(ctx, dl)
	})
}

func (d *deliveries) of(id string) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.max[id]
}

func TestPoisonMessagesAmongGoodOnes(t *testing.T) {
	srv := newServer(t, nil)
	e := openEngine(t, engine.Config{})
	startWorker(t, srv, e, workerOptions{})
	c, err := client.New(srv.nc, client.WithRun("poison"))
	if err != nil {
		t.Fatal(err)
	}
	jobs := srv.cfg.Jobs.Subjects[0][:len(srv.cfg.Jobs.Subjects[0])-1] + "poison"
	reply := func(id string) map[string][]string {
		return map[string][]string{schema.HeaderReply: {c.ReplySubject(id)}, schema.HeaderMsgID: {id}}
	}
	type bad struct {
		id   string
		h    map[string][]string
		data string
		code schema.Code
	}
	bads := []bad{
		{"garbage", reply("garbage"), "\xc1 not msgpack", schema.CodeBadPayload},
		{"badjson", withJSON(reply("badjson")), `{"id":"badjson","texts":`, schema.CodeBadPayload},
		{"empty", withJSON(reply("empty")), `{"id":"empty","texts":[]}`, schema.CodeEmptyJob},
		{"version", withJSON(reply("version")), `{"v":7,"id":"version","texts":["x"]}`, schema.CodeBadVersion},
		{"output", withJSON(reply("output")), `{"id":"output","texts":["x"],"outputs":["nope"]}`, schema.CodeUnknownOutput},
	}
	var good []string
	for i := range 12 {
		if i%2 == 1 && i/2 < len(bads) {
			b := bads[i/2]
			publishRaw(t, srv.js, jobs, b.h, []byte(b.data))
		}
		j := schema.NewJob(fmt.Sprintf("good%d", i), fmt.Sprintf("good text %d", i))
		if _, err := c.Submit(context.Background(), j); err != nil {
			t.Fatal(err)
		}
		good = append(good, j.ID)
	}
	var all []string
	all = append(all, good...)
	for _, b := range bads {
		all = append(all, b.id)
	}
	got := collect(t, c, "poison", all)
	for _, id := range good {
		checkResult(t, e, got[id], []string{"good text " + strings.TrimPrefix(id, "good")}, nil)
	}
	for _, b := range bads {
		if r := got[b.id]; r.Error == nil || r.Error.Code != b.code || r.Error.Retriable {
			t.Errorf("job %s: error %v, want %s (not retriable)", b.id, r.Error, b.code)
		}
	}
	natstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if n := natstest.StreamCount(t, srv.js, srv.cfg.DLQ.Name); n != uint64(len(bads)) {
			return fmt.Errorf("%d dead letters, want %d", n, len(bads))
		}
		return nil
	})
	dl := map[string]natsjs.Msg{}
	for _, m := range natstest.StreamMsgs(t, srv.js, srv.cfg.DLQ.Name, "") {
		dl[m.Headers().Get(jetstream.HeaderDLQJobID)] = m
	}
	for _, b := range bads {
		m, ok := dl[b.id]
		if !ok {
			t.Errorf("job %s: no dead letter", b.id)
			continue
		}
		h := m.Headers()
		if h.Get(jetstream.HeaderDLQCode) != string(b.code) || h.Get(jetstream.HeaderDLQDelivered) != "1" ||
			h.Get(jetstream.HeaderSubject) != jobs || m.Subject() != jetstream.DeadLetterSubject("embed.dlq.", string(b.code), h.Get(schema.HeaderTenant)) || string(m.Data()) != b.data {
			t.Errorf("dead letter of %s: subject %s headers %v body %q", b.id, m.Subject(), h, m.Data())
		}
	}
	// Terminated, not redelivered: the work queue is empty and nothing waits.
	natstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		info := consumerInfo(t, srv)
		if info.NumAckPending != 0 || info.NumPending != 0 || info.NumRedelivered != 0 {
			return fmt.Errorf("consumer: %d ack pending, %d pending, %d redelivered", info.NumAckPending, info.NumPending, info.NumRedelivered)
		}
		if n := natstest.StreamCount(t, srv.js, srv.cfg.Jobs.Name); n != 0 {
			return fmt.Errorf("%d jobs left in the work queue", n)
		}
		return nil
	})
}

func withJSON(h map[string][]string) map[string][]string {
	h[schema.HeaderContentType] = []string{schema.MediaTypeJSON}
	return h
}

// lostAcks drops every ACK, as a process that published the results and
// died before acknowledging would.
type lostAcks struct{ consumer.Message }

func (lostAcks) Ack() error { return nil }

func TestRedeliveryAfterWorkerStopsMidBatch(t *testing.T) {
	srv := newServer(t, func(c *jetstream.Config) { c.Consumer.AckWait = time.Second })
	e := openEngine(t, engine.Config{})
	c, err := client.New(srv.nc, client.WithRun("redeliver"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 30
	ids := submitJobs(t, c, n, "r%02d", "redelivered text %d")
	// Worker A publishes results but its ACKs are lost, and after its first
	// few batches it blocks in Embed until it is stopped.
	var (
		mu      sync.Mutex
		calls   int
		blocked = make(chan struct{})
	)
	gate := engine.EmbedderFunc(func(ctx context.Context, texts []engine.Text, call engine.Call) ([]engine.Embedding, engine.CallReport, error) {
		mu.Lock()
		calls++
		k := calls
		mu.Unlock()
		if k > 2 {
			if k == 3 {
				close(blocked)
			}
			<-ctx.Done()
			return nil, engine.CallReport{}, ctx.Err()
		}
		return e.Embed(ctx, texts, engine.Call{})
	})
	a := startWorker(t, srv, gate, workerOptions{
		cfg: consumer.Config{},
		sink: func(cons *consumer.Loop) jetstream.Sink {
			return sinkFunc(func(ctx context.Context, d consumer.Delivery) error {
				if st, ok := d.(*consumer.Stored); ok {
					st.Msg = lostAcks{st.Msg}
				}
				return cons.Submit(ctx, d)
			})
		},
	})
	select {
	case <-blocked:
	case <-time.After(20 * time.Second):
		t.Fatal("worker A never reached its third batch")
	}
	// Each job is its own Embed call: the first two run alongside the
	// third; let their results land before the stop.
	natstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n := natstest.StreamCount(t, srv.js, srv.cfg.Results.Name); n < 2 {
			return fmt.Errorf("%d results stored", n)
		}
		return nil
	})
	// Stopped mid-batch with no grace: the running batch is cancelled.
	a.stop(t, time.Millisecond)
	var byA []string
	for _, m := range natstest.StreamMsgs(t, srv.js, srv.cfg.Results.Name, "") {
		byA = append(byA, m.Headers().Get(schema.HeaderJobID))
	}
	published := len(byA)
	if published == 0 {
		t.Fatal("worker A published nothing before it stopped")
	}

	var seen deliveries
	startWorker(t, srv, e, workerOptions{sink: seen.wrap})
	got := collect(t, c, "redeliver", ids)
	if len(got) != n {
		t.Fatalf("%d results for %d jobs", len(got), n)
	}
	natstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if left := natstest.StreamCount(t, srv.js, srv.cfg.Jobs.Name); left != 0 {
			return fmt.Errorf("%d jobs left in the work queue", left)
		}
		return nil
	})
	// B settled every job, so it saw all A left behind.
	redelivered := 0
	for _, id := range ids {
		if seen.of(id) > 1 {
			redelivered++
		}
	}
	t.Logf("worker A published %d results; worker B saw %d jobs again", published, redelivered)
	if redelivered <= published {
		t.Errorf("worker B saw %d jobs again; want the %d A published (ACK lost) and those A held", redelivered, published)
	}
	for _, id := range byA {
		if seen.of(id) < 2 {
			t.Errorf("job %s, published by A without ACK, was not redelivered to B", id)
		}
	}
	// Jobs whose result A had published ran again on B: the stream kept one.
	if stored := natstest.StreamCount(t, srv.js, srv.cfg.Results.Name); stored != n {
		t.Errorf("%d results stored for %d jobs: duplicates were not dropped", stored, n)
	}
}

// TestJobTenantTooLong: through a real server and worker, with the usage
// stream on: a job whose subject names a tenant over schema.MaxTenantBytes
// is terminated bad_reply on its first delivery (a dead letter, never
// redelivered), and the good job beside it is answered and metered. Before,
// the tenant passed, its usage event was refused, and that refusal NAKed
// the job: it ran MaxDeliver times and went unmetered.
func TestJobTenantTooLong(t *testing.T) {
	srv := newServer(t, nil)
	e := openEngine(t, engine.Config{})
	startWorker(t, srv, e, workerOptions{})
	c, err := client.New(srv.nc, client.WithRun("long"))
	if err != nil {
		t.Fatal(err)
	}
	long := "embed.jobs." + strings.Repeat("t", schema.MaxTenantBytes+1) + ".long.bad"
	publishRaw(t, srv.js, long, withJSON(map[string][]string{schema.HeaderMsgID: {"bad"}}), []byte(`{"id":"bad","texts":["x"]}`))
	good := schema.NewJob("good", "good text")
	if _, err := c.Submit(context.Background(), good); err != nil {
		t.Fatal(err)
	}
	got := collect(t, c, "long", []string{"good"})
	checkResult(t, e, got["good"], []string{"good text"}, nil)
	natstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if n := natstest.StreamCount(t, srv.js, srv.cfg.DLQ.Name); n != 1 {
			return fmt.Errorf("%d dead letters, want 1", n)
		}
		info := consumerInfo(t, srv)
		if info.NumAckPending != 0 || info.NumPending != 0 || info.NumRedelivered != 0 {
			return fmt.Errorf("consumer: %d ack pending, %d pending, %d redelivered", info.NumAckPending, info.NumPending, info.NumRedelivered)
		}
		return nil
	})
	m := natstest.StreamMsgs(t, srv.js, srv.cfg.DLQ.Name, "")[0]
	if h := m.Headers(); h.Get(jetstream.HeaderDLQCode) != string(schema.CodeBadReply) || h.Get(jetstream.HeaderDLQDelivered) != "1" {
		t.Errorf("dead letter headers %v, want bad_reply on delivery 1", h)
	}
}
