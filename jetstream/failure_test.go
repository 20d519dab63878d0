package jetstream_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/internal/consumer"
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

func (d *deliveries) wrap(c *consumer.Consumer) jetstream.Sink {
	d.max = map[string]uint64{}
	return sinkFunc(func(ctx context.Context, dl consumer.Delivery) error {
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
	c, err := jetstream.NewClient(srv.nc, jetstream.WithRun("poison"))
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
			h.Get(jetstream.HeaderSubject) != jobs || m.Subject() != "embed.dlq."+string(b.code) || string(m.Data()) != b.data {
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
	c, err := jetstream.NewClient(srv.nc, jetstream.WithRun("redeliver"))
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
	gate := embedderFunc(func(ctx context.Context, texts []engine.Text) ([]engine.Embedding, engine.CallReport, error) {
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
		return e.Embed(ctx, texts)
	})
	a := startWorker(t, srv, gate, workerOptions{
		cfg: consumer.Config{Patience: time.Millisecond, MaxBatchJobs: 4},
		sink: func(cons *consumer.Consumer) jetstream.Sink {
			return sinkFunc(func(ctx context.Context, d consumer.Delivery) error {
				d.Msg = lostAcks{d.Msg}
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

type embedderFunc func(ctx context.Context, texts []engine.Text) ([]engine.Embedding, engine.CallReport, error)

func (f embedderFunc) Embed(ctx context.Context, texts []engine.Text) ([]engine.Embedding, engine.CallReport, error) {
	return f(ctx, texts)
}

// guardedEngine refuses every text over 16 tokens with shape_not_warmed
// until its ceiling is raised, like a TensorRT consumer whose fleet has
// not compiled the shape yet.
func guardedEngine(t *testing.T) *engine.Engine {
	return openEngine(t, engine.Config{Guard: true, GuardSeq: 16})
}

var longText = strings.Repeat("a long text needs a long shape ", 6)

func TestRetriableRefusalIsNakedThenSucceeds(t *testing.T) {
	srv := newServer(t, nil)
	e := guardedEngine(t)
	var seen deliveries
	startWorker(t, srv, e, workerOptions{
		cfg:  consumer.Config{NakBackoff: consumer.Backoff{Base: 100 * time.Millisecond, Max: 200 * time.Millisecond, Jitter: -1}},
		sink: seen.wrap,
	})
	c, err := jetstream.NewClient(srv.nc, jetstream.WithRun("guard"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(context.Background(), schema.NewJob("long", longText)); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := seen.of("long"); n < 3 {
			return fmt.Errorf("delivered %d times, want NAKs and redeliveries", n)
		}
		return nil
	})
	if n := natstest.StreamCount(t, srv.js, srv.cfg.Results.Name); n != 0 {
		t.Fatalf("%d results published while the shape was refused", n)
	}
	// The fleet compiled the shape: the next delivery runs.
	e.Coverage().Raise(1, 512)
	got := collect(t, c, "guard", []string{"long"})
	checkResult(t, e, got["long"], []string{longText}, nil)
	if n := natstest.StreamCount(t, srv.js, srv.cfg.DLQ.Name); n != 0 {
		t.Errorf("%d dead letters for a job that succeeded", n)
	}
}

func TestMaxDeliverGivesFinalErrorAndDeadLetter(t *testing.T) {
	srv := newServer(t, func(c *jetstream.Config) { c.Consumer.MaxDeliver = 3 })
	e := guardedEngine(t)
	startWorker(t, srv, e, workerOptions{
		cfg: consumer.Config{NakBackoff: consumer.Backoff{Base: 50 * time.Millisecond, Max: 50 * time.Millisecond, Jitter: -1}},
	})
	c, err := jetstream.NewClient(srv.nc, jetstream.WithRun("maxdeliver"))
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range []*schema.Job{schema.NewJob("never", longText), schema.NewJob("short", "short")} {
		if _, err := c.Submit(context.Background(), j); err != nil {
			t.Fatal(err)
		}
	}
	got := collect(t, c, "maxdeliver", []string{"never", "short"})
	checkResult(t, e, got["short"], []string{"short"}, nil)
	if r := got["never"]; r.Error == nil || r.Error.Code != schema.CodeShapeNotWarmed || !r.Error.Retriable || len(r.Items) != 0 {
		t.Fatalf("final result %+v, want a retriable shape_not_warmed job error", r)
	}
	natstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if n := natstest.StreamCount(t, srv.js, srv.cfg.DLQ.Name); n != 1 {
			return fmt.Errorf("%d dead letters, want 1", n)
		}
		return nil
	})
	m := natstest.StreamMsgs(t, srv.js, srv.cfg.DLQ.Name, "")[0]
	if h := m.Headers(); h.Get(jetstream.HeaderDLQCode) != string(schema.CodeShapeNotWarmed) || h.Get(jetstream.HeaderDLQDelivered) != "3" || h.Get(jetstream.HeaderDLQJobID) != "never" {
		t.Errorf("dead letter headers %v", h)
	}
	natstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if info := consumerInfo(t, srv); info.NumAckPending != 0 || info.NumPending != 0 {
			return fmt.Errorf("consumer: %d ack pending, %d pending", info.NumAckPending, info.NumPending)
		}
		return nil
	})
}

// nakSink NAKs every delivery with a fixed delay and records when each
// delivery arrived.
type nakSink struct {
	delay time.Duration
	mu    sync.Mutex
	at    []time.Time
}

func (s *nakSink) Submit(_ context.Context, d consumer.Delivery) error {
	s.mu.Lock()
	s.at = append(s.at, d.Received)
	s.mu.Unlock()
	return d.Msg.NakWithDelay(s.delay)
}

func TestNakDelayIsExactWithBackOff(t *testing.T) {
	for _, conn := range []bool{true, false} {
		t.Run(fmt.Sprint("conn=", conn), func(t *testing.T) {
			// The default shape of the consumer: a backoff doubling from
			// AckWait, here 1s, 4s, 16s.
			srv := newServer(t, func(c *jetstream.Config) {
				c.Consumer.AckWait, c.Consumer.MaxDeliver = time.Second, 6
				c.Consumer.BackOff = []time.Duration{time.Second, 4 * time.Second, 16 * time.Second}
			})
			publishRaw(t, srv.js, "embed.jobs.nak", nil, []byte("job"))
			sink := &nakSink{delay: 300 * time.Millisecond}
			opts := []jetstream.PullOption{jetstream.PullLogger(testLogger(t))}
			if conn {
				opts = append(opts, jetstream.PullConn(srv.nc))
			}
			loop, err := jetstream.Pull(context.Background(), jobsConsumer(t, srv), sink, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer loop.Stop()
			if !conn {
				// What nats-server does without the correction: the third
				// delivery waits the 4s backoff step (less AckWait), not
				// 300ms, after the second one's NAK.
				natstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
					sink.mu.Lock()
					defer sink.mu.Unlock()
					if len(sink.at) < 3 {
						return fmt.Errorf("%d deliveries", len(sink.at))
					}
					return nil
				})
				sink.mu.Lock()
				defer sink.mu.Unlock()
				if gap := sink.at[2].Sub(sink.at[1]); gap < 2500*time.Millisecond {
					t.Errorf("third delivery %v after the second; the server no longer adds the backoff to NAK delays?", gap)
				}
				return
			}
			natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
				sink.mu.Lock()
				defer sink.mu.Unlock()
				if len(sink.at) < 5 {
					return fmt.Errorf("%d deliveries", len(sink.at))
				}
				return nil
			})
			sink.mu.Lock()
			defer sink.mu.Unlock()
			for i := 1; i < len(sink.at); i++ {
				// Uncorrected, deliveries 3 to 5 would come 3.3s to 15.3s
				// apart; the upper bound leaves room for a loaded machine.
				if gap := sink.at[i].Sub(sink.at[i-1]); gap < 250*time.Millisecond || gap > 2500*time.Millisecond {
					t.Errorf("delivery %d came %v after the NAK of the one before, want about 300ms", i+1, gap)
				}
			}
		})
	}
}
