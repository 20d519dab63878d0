package jetstream_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nuid"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/fakes"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// These tests take the delivery rules of DESIGN.md that the consumer's
// unit tests prove with fakes through a real nats-server and the real
// engine: deadlines, per-item errors, core inbox and absent replies,
// InProgress for a job held past AckWait, and a result the results stream
// refuses.

// settledAll waits until the durable consumer has nothing pending or
// unacknowledged.
func settledAll(t *testing.T, srv *server) {
	t.Helper()
	natstest.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		if info := consumerInfo(t, srv); info.NumAckPending != 0 || info.NumPending != 0 || info.NumRedelivered != 0 {
			return fmt.Errorf("consumer: %d ack pending, %d pending, %d redelivered", info.NumAckPending, info.NumPending, info.NumRedelivered)
		}
		return nil
	})
}

func TestDeadlinePassedIsAnsweredWithoutRunning(t *testing.T) {
	srv := newServer(t, nil)
	emb := &fakes.Embedder{Embedder: openEngine(t, engine.Config{})}
	startWorker(t, srv, emb, workerOptions{})
	c, err := client.New(srv.nc, client.WithRun("deadline"))
	if err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	field := schema.NewJob("field", "too late")
	field.Deadline = past
	if _, err := c.Submit(context.Background(), field); err != nil {
		t.Fatal(err)
	}
	// The same deadline as the Embed-Deadline header of a raw job.
	h := withJSON(map[string][]string{
		schema.HeaderMsgID: {"header"}, schema.HeaderReply: {c.ReplySubject("header")}, schema.HeaderDeadline: {past},
	})
	publishRaw(t, srv.js, c.JobSubject("header"), h, []byte(`{"v":1,"id":"header","texts":["too late"]}`))

	got := collect(t, c, "deadline", []string{"field", "header"})
	for id, r := range got {
		if r.Error == nil || r.Error.Code != schema.CodeDeadlineExceeded || len(r.Items) != 0 {
			t.Errorf("job %s: %+v, want deadline_exceeded without items", id, r)
		}
	}
	settledAll(t, srv) // ACKed, not NAKed or left to expire
	if calls := emb.Calls(); calls != 0 {
		t.Errorf("the engine ran %d times for jobs past their deadline", calls)
	}
	if n := natstest.StreamCount(t, srv.js, srv.cfg.DLQ.Name); n != 0 {
		t.Errorf("%d dead letters for jobs the producer gave up on", n)
	}
}

func TestItemErrorsKeepTheRestOfTheJob(t *testing.T) {
	srv := newServer(t, nil)
	e := openEngine(t, engine.Config{})
	startWorker(t, srv, e, workerOptions{})
	c, err := client.New(srv.nc, client.WithRun("items"))
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("word ", e.MaxTokens()+10)
	no := false
	// msgpack carries the invalid UTF-8 as it is; JSON could not.
	j := &schema.Job{ID: "mixed", Texts: []string{"fine text", "bad \xff\xfe utf-8", long, "also fine"}, Truncate: &no}
	if _, err := c.Submit(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	r := collect(t, c, "items", []string{"mixed"})["mixed"]
	if r.Error != nil || len(r.Items) != 4 {
		t.Fatalf("result %+v, want 4 items and no job error", r)
	}
	if it := r.Items[1]; it.Error == nil || it.Error.Code != schema.CodeInvalidUTF8 || it.Dense != nil {
		t.Errorf("invalid UTF-8 item: %+v", it)
	}
	if it := r.Items[2]; it.Error == nil || it.Error.Code != schema.CodeTextTooLong || it.Dense != nil {
		t.Errorf("too long item with truncate=false: %+v", it)
	}
	want, _, err := e.Embed(context.Background(), engineText([]string{"fine text", "also fine"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	for k, i := range []int{0, 3} {
		if it := r.Items[i]; it.Error != nil || !closeVec(it.Dense, want[k].Dense) {
			t.Errorf("item %d beside the failed ones: error %v, dense equal to the engine's %v", i, it.Error, closeVec(it.Dense, want[k].Dense))
		}
	}
	settledAll(t, srv)
	if n := natstest.StreamCount(t, srv.js, srv.cfg.DLQ.Name); n != 0 {
		t.Errorf("%d dead letters for a job with item errors", n)
	}
}

func TestCoreInboxReplyAndNoReply(t *testing.T) {
	srv := newServer(t, nil)
	e := openEngine(t, engine.Config{})
	w := startWorker(t, srv, e, workerOptions{})
	jobs := strings.TrimSuffix(srv.cfg.Jobs.Subjects[0], ">") + "core"

	// A job stored in the stream whose reply is a requester's core inbox
	// (in the job's tenant's space: the tenant is "core").
	inbox := "_INBOX_core." + nuid.Next()
	sub, err := srv.nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	publishRaw(t, srv.js, jobs, withJSON(map[string][]string{schema.HeaderMsgID: {"inbox"}}),
		fmt.Appendf(nil, `{"v":1,"id":"inbox","texts":["to my inbox"],"reply":%q}`, inbox))
	m, err := sub.NextMsg(15 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	res, err := schema.DecodeResult(m.Data, schema.EncodingFor(m.Header.Get(schema.HeaderContentType)))
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, e, res, []string{"to my inbox"}, nil)

	// A job with no reply at all: embedded, discarded, ACKed.
	publishRaw(t, srv.js, jobs, withJSON(map[string][]string{schema.HeaderMsgID: {"nowhere"}}),
		[]byte(`{"v":1,"id":"nowhere","texts":["nobody listens"]}`))
	natstest.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		if st := w.cons.Stats(); st.Jobs != 2 || st.Texts != 2 {
			return fmt.Errorf("consumer stats %+v, want both jobs embedded", st)
		}
		return nil
	})
	settledAll(t, srv)
	for _, s := range []string{srv.cfg.Results.Name, srv.cfg.DLQ.Name} {
		if n := natstest.StreamCount(t, srv.js, s); n != 0 {
			t.Errorf("%s holds %d messages, want none", s, n)
		}
	}
}

func TestInProgressKeepsAJobPastAckWait(t *testing.T) {
	srv := newServer(t, func(c *jetstream.Config) { c.Consumer.AckWait = time.Second })
	var seen deliveries
	startWorker(t, srv, &fakes.Embedder{Embedder: openEngine(t, engine.Config{}), Hold: 3 * time.Second}, workerOptions{sink: seen.wrap})
	c, err := client.New(srv.nc, client.WithRun("slow"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(context.Background(), schema.NewJob("slow", "a job that takes three ack waits")); err != nil {
		t.Fatal(err)
	}
	collect(t, c, "slow", []string{"slow"})
	settledAll(t, srv)
	if n := seen.of("slow"); n != 1 {
		t.Errorf("delivered %d times: the job expired while it ran", n)
	}
	if info := consumerInfo(t, srv); info.Delivered.Consumer != 1 {
		t.Errorf("the server delivered %d messages, want 1", info.Delivered.Consumer)
	}
}

func TestRefusedResultIsNakedThenDeadLettered(t *testing.T) {
	srv := newServer(t, func(c *jetstream.Config) { c.Consumer.MaxDeliver = 3 })
	// The results stream refuses anything over 64 bytes: every result.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := srv.js.Stream(ctx, srv.cfg.Results.Name)
	if err != nil {
		t.Fatal(err)
	}
	rc := s.CachedInfo().Config
	rc.MaxMsgSize = 64
	if _, err := srv.js.UpdateStream(ctx, rc); err != nil {
		t.Fatal(err)
	}
	var seen deliveries
	startWorker(t, srv, openEngine(t, engine.Config{}), workerOptions{
		cfg:  consumer.Config{NakBackoff: consumer.Backoff{Base: 50 * time.Millisecond, Max: 50 * time.Millisecond, Jitter: -1}},
		sink: seen.wrap,
	})
	c, err := client.New(srv.nc, client.WithRun("refused"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(context.Background(), schema.NewJob("refused", "its result is too big for the stream")); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		if n := natstest.StreamCount(t, srv.js, srv.cfg.DLQ.Name); n != 1 {
			return fmt.Errorf("%d dead letters", n)
		}
		return nil
	})
	settledAll(t, srv)
	if n := seen.of("refused"); n != 3 {
		t.Errorf("delivered %d times, want NAKs up to MaxDeliver 3", n)
	}
	dl := natstest.StreamMsgs(t, srv.js, srv.cfg.DLQ.Name, "")[0]
	if h := dl.Headers(); h.Get(jetstream.HeaderDLQCode) != consumer.ReasonPublishFailed || h.Get(jetstream.HeaderDLQJobID) != "refused" || h.Get(jetstream.HeaderDLQDelivered) != "3" {
		t.Errorf("dead letter headers %v", h)
	}
	if n := natstest.StreamCount(t, srv.js, srv.cfg.Results.Name); n != 0 {
		t.Errorf("%d results stored past the size limit", n)
	}
}

// TestMaxDeliveriesAdvisoryReachesDLQ: a job that no consumer settles (its
// process hung or died on every delivery) is recorded in the DLQ by the
// server's max-deliveries advisory.
func TestMaxDeliveriesAdvisoryReachesDLQ(t *testing.T) {
	srv := newServer(t, func(c *jetstream.Config) {
		c.Consumer.AckWait, c.Consumer.MaxDeliver = 500*time.Millisecond, 2
	})
	var got atomic.Int32
	hung := sinkFunc(func(context.Context, consumer.Delivery) error {
		got.Add(1)
		return nil // never settled
	})
	loop, err := jetstream.Pull(context.Background(), jobsConsumer(t, srv), hung, jetstream.PullLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer loop.Stop()
	publishRaw(t, srv.js, strings.TrimSuffix(srv.cfg.Jobs.Subjects[0], ">")+"hung", map[string][]string{schema.HeaderMsgID: {"hung"}}, []byte("job"))
	natstest.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		if n := natstest.StreamCount(t, srv.js, srv.cfg.DLQ.Name); n != 1 {
			return fmt.Errorf("%d dead letters", n)
		}
		return nil
	})
	m := natstest.StreamMsgs(t, srv.js, srv.cfg.DLQ.Name, "")[0]
	if !strings.HasPrefix(m.Subject(), "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.") || !strings.Contains(string(m.Data()), `"deliveries":2`) {
		t.Errorf("dead letter on %s: %s, want the max-deliveries advisory", m.Subject(), m.Data())
	}
	if n := got.Load(); n != 2 {
		t.Errorf("%d deliveries, want MaxDeliver 2", n)
	}
}

// TestInFlightBudgetStopsPulling: with an in-flight budget of one job, the
// process holds one job at a time and stops pulling meanwhile, so the
// server sees no more jobs out than that one, the one waiting in Submit and
// the prefetch; the rest stay in the stream for other processes.
func TestInFlightBudgetStopsPulling(t *testing.T) {
	srv := newServer(t, nil)
	w := startWorker(t, srv, &fakes.Embedder{Embedder: openEngine(t, engine.Config{}), Delay: 50 * time.Millisecond}, workerOptions{
		cfg:  consumer.Config{InFlightTokens: 1},
		pull: []jetstream.PullOption{jetstream.PrefetchLimits(2, 2)},
	})
	c, err := client.New(srv.nc, client.WithRun("budget"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	ids := submitJobs(t, c, n, "b%d", "budgeted text %d")
	maxHeld, maxOut := 0, 0
	natstest.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		maxHeld = max(maxHeld, w.cons.Stats().Held)
		info := consumerInfo(t, srv)
		maxOut = max(maxOut, info.NumAckPending)
		if n := natstest.StreamCount(t, srv.js, srv.cfg.Results.Name); n != 20 {
			return fmt.Errorf("%d results", n)
		}
		return nil
	})
	collect(t, c, "budget", ids)
	if maxHeld > 1 || maxOut > 4 {
		t.Errorf("held up to %d jobs and had %d out at once; want 1 held and at most 1+1+2 out", maxHeld, maxOut)
	}
	if maxHeld == 0 || maxOut < 2 {
		t.Errorf("held up to %d, %d out: the sampling saw no work in flight", maxHeld, maxOut)
	}
}

// TestRequestOverBudgetWaitsThenOverloaded: a request that finds the
// interactive budget full waits in the request queue without holding the
// service's handler (its caller is waiting: it gets vectors once the
// request ahead is done); one that finds the queue full too is answered
// overloaded, retriable, at once, while the others complete.
func TestRequestOverBudgetWaitsThenOverloaded(t *testing.T) {
	srv := newServer(t, nil)
	w := startWorker(t, srv, &fakes.Embedder{Embedder: openEngine(t, engine.Config{}), Delay: 2 * time.Second}, workerOptions{
		cfg: consumer.Config{InteractiveTokens: 1, RequestQueueTokens: 1},
	})
	c, err := client.New(srv.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	first, second := make(chan error, 1), make(chan *schema.Result, 1)
	go func() {
		_, err := c.Embed(ctx, "holds the budget")
		first <- err
	}()
	natstest.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if st := w.cons.Stats(); st.Held != 1 {
			return fmt.Errorf("%d held", st.Held)
		}
		return nil
	})
	go func() {
		res, _ := c.Embed(ctx, "waits its turn")
		second <- res
	}()
	natstest.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if st := w.cons.Stats(); st.Waiting != 1 {
			return fmt.Errorf("%d waiting", st.Waiting)
		}
		return nil
	})
	start := time.Now()
	res, err := c.Embed(ctx, "finds the queue full")
	if res == nil || res.Error == nil || res.Error.Code != schema.CodeOverloaded || !res.Error.Retriable || time.Since(start) > time.Second {
		t.Errorf("third request: %+v, %v after %s; want a retriable overloaded answer at once", res, err, time.Since(start))
	}
	if err := <-first; err != nil {
		t.Errorf("first request: %v", err)
	}
	if res := <-second; res == nil || res.Error != nil || len(res.Items) != 1 || len(res.Items[0].Dense) == 0 {
		t.Errorf("the waiting request: %+v, want vectors", res)
	}
}
