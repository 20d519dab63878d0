package jetstream

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/internal/natstest"
)

func newJS(t *testing.T, url string) natsjs.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func wantActions(t *testing.T, r ProvisionReport, want Action) {
	t.Helper()
	if len(r.Outcomes) != 8 {
		t.Fatalf("report has %d outcomes, want 8:\n%s", len(r.Outcomes), r)
	}
	for _, o := range r.Outcomes {
		if o.Action != want {
			t.Errorf("%s %s: %v, want %v", o.Kind, o.Name, o.Action, want)
		}
	}
}

func TestProvisionFreshThenNoop(t *testing.T) {
	s := natstest.RunServer(t)
	ctx := testCtx(t, 20*time.Second)
	js := newJS(t, s.ClientURL())
	cfg := DefaultConfig()

	r, err := Provision(ctx, js, cfg)
	if err != nil {
		t.Fatalf("Provision: %v\n%s", err, r)
	}
	wantActions(t, r, Created)
	if !r.Changed() || r.Refused() {
		t.Errorf("Changed=%v Refused=%v, want true false", r.Changed(), r.Refused())
	}

	jobs, err := js.Stream(ctx, "EMBED_JOBS")
	if err != nil {
		t.Fatal(err)
	}
	jc := jobs.CachedInfo().Config
	if jc.Retention != natsjs.WorkQueuePolicy || jc.Storage != natsjs.FileStorage || jc.Discard != natsjs.DiscardNew ||
		jc.Duplicates != 10*time.Minute || jc.MaxAge != 7*24*time.Hour {
		t.Errorf("jobs stream config = %+v", jc)
	}
	dlq, err := js.Stream(ctx, "EMBED_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	if got := sorted(dlq.CachedInfo().Config.Subjects); strings.Join(got, " ") != "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.EMBED_JOBS.embedder embed.dlq.>" {
		t.Errorf("dlq subjects = %v", got)
	}
	usage, err := js.Stream(ctx, "EMBED_USAGE")
	if err != nil {
		t.Fatal(err)
	}
	// Capped, kept for a billing month, never refusing (discard old), and
	// dropping a redelivered job's second event for longer than its
	// redeliveries take.
	if uc := usage.CachedInfo().Config; uc.Retention != natsjs.LimitsPolicy || uc.Discard != natsjs.DiscardOld ||
		uc.MaxBytes != DefaultUsageMaxBytes || uc.MaxAge != 35*24*time.Hour || uc.Duplicates != 20*time.Minute ||
		strings.Join(uc.Subjects, " ") != "embed.usage.>" {
		t.Errorf("usage stream config = %+v", uc)
	}
	c, err := js.Consumer(ctx, "EMBED_JOBS", "embedder")
	if err != nil {
		t.Fatal(err)
	}
	cc := c.CachedInfo().Config
	if cc.AckPolicy != natsjs.AckExplicitPolicy || cc.AckWait != time.Minute || cc.MaxDeliver != 5 || len(cc.BackOff) != 4 || cc.MaxAckPending != 1024 {
		t.Errorf("consumer config = %+v", cc)
	}

	r, err = Provision(ctx, js, cfg)
	if err != nil {
		t.Fatalf("re-run: %v\n%s", err, r)
	}
	wantActions(t, r, Unchanged)
	if r.Changed() {
		t.Error("re-run reports a change")
	}
	if got := r.String(); strings.Count(got, "unchanged") != 8 || strings.Count(got, "\n") != 8 {
		t.Errorf("report:\n%s", got)
	}
}

func TestProvisionDriftUpdated(t *testing.T) {
	s := natstest.RunServer(t)
	ctx := testCtx(t, 20*time.Second)
	js := newJS(t, s.ClientURL())
	cfg := DefaultConfig()
	if _, err := Provision(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}

	cfg.Jobs.MaxAge = 48 * time.Hour
	cfg.Jobs.MaxBytes = 64 << 20
	cfg.Consumer.AckWait = 30 * time.Second
	cfg.Consumer.BackOff = ExponentialBackOff(30*time.Second, 3)
	cfg.Consumer.MaxAckPending = 10
	cfg.Engines.History = 2
	r, err := Provision(ctx, js, cfg)
	if err != nil {
		t.Fatalf("Provision: %v\n%s", err, r)
	}
	t.Logf("report:\n%s", r)
	for _, tc := range []struct {
		kind, name string
		action     Action
		fields     string
	}{
		{"stream", "EMBED_JOBS", Updated, "MaxAge MaxBytes"},
		{"stream", "EMBED_RESULTS", Unchanged, ""},
		{"consumer", "EMBED_JOBS/embedder", Updated, "AckWait BackOff MaxAckPending"},
		{"kv", "EMBED_ENGINES", Updated, "History"},
	} {
		o, ok := r.Find(tc.kind, tc.name)
		if !ok {
			t.Fatalf("no outcome for %s %s", tc.kind, tc.name)
		}
		if o.Action != tc.action || strings.Join(o.Fields(), " ") != tc.fields {
			t.Errorf("%s %s: %v %v, want %v [%s]", tc.kind, tc.name, o.Action, o.Fields(), tc.action, tc.fields)
		}
	}
	if !strings.Contains(r.String(), "MaxAge 168h0m0s -> 48h0m0s") {
		t.Errorf("report does not show the MaxAge change:\n%s", r)
	}

	// The server has really taken the new values.
	jobs, _ := js.Stream(ctx, "EMBED_JOBS")
	if jc := jobs.CachedInfo().Config; jc.MaxAge != 48*time.Hour || jc.MaxBytes != 64<<20 {
		t.Errorf("jobs stream after update: MaxAge %v MaxBytes %d", jc.MaxAge, jc.MaxBytes)
	}
	c, _ := js.Consumer(ctx, "EMBED_JOBS", "embedder")
	if cc := c.CachedInfo().Config; cc.AckWait != 30*time.Second || cc.MaxAckPending != 10 {
		t.Errorf("consumer after update: AckWait %v MaxAckPending %d", cc.AckWait, cc.MaxAckPending)
	}
	r, err = Provision(ctx, js, cfg)
	if err != nil || r.Changed() {
		t.Errorf("re-run after update: changed=%v err=%v\n%s", r.Changed(), err, r)
	}
}

func TestProvisionDriftRefused(t *testing.T) {
	s := natstest.RunServer(t)
	ctx := testCtx(t, 20*time.Second)
	js := newJS(t, s.ClientURL())
	cfg := DefaultConfig()
	// Someone made EMBED_JOBS by hand, as a limits stream in memory, and the
	// consumer with a different deliver policy.
	if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "EMBED_JOBS", Subjects: []string{"embed.jobs.>"}, Storage: natsjs.MemoryStorage, MaxAge: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateConsumer(ctx, "EMBED_JOBS", natsjs.ConsumerConfig{Durable: "embedder", AckPolicy: natsjs.AckExplicitPolicy, DeliverPolicy: natsjs.DeliverNewPolicy}); err != nil {
		t.Fatal(err)
	}

	r, err := Provision(ctx, js, cfg)
	t.Logf("report:\n%s\nerr: %v", r, err)
	if !errors.Is(err, ErrDrift) {
		t.Fatalf("err = %v, want ErrDrift", err)
	}
	for _, want := range []string{"stream EMBED_JOBS", "Retention", "Storage", "consumer EMBED_JOBS/embedder", "DeliverPolicy"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q: %v", want, err)
		}
	}
	if !r.Refused() {
		t.Error("Refused() = false")
	}
	o, _ := r.Find("stream", "EMBED_JOBS")
	if o.Action != Refused || strings.Join(o.Fields(), " ") != "Retention Storage" {
		t.Errorf("jobs stream: %v %v, want refused [Retention Storage]", o.Action, o.Fields())
	}
	// A refused object is left alone, even its updatable fields.
	jobs, _ := js.Stream(ctx, "EMBED_JOBS")
	if jc := jobs.CachedInfo().Config; jc.MaxAge != time.Hour || jc.Storage != natsjs.MemoryStorage {
		t.Errorf("refused stream was changed: %+v", jc)
	}
	// The other objects are still provisioned.
	for _, name := range []string{"EMBED_RESULTS", "EMBED_DLQ"} {
		if o, _ := r.Find("stream", name); o.Action != Created {
			t.Errorf("stream %s: %v, want created", name, o.Action)
		}
	}
	if o, _ := r.Find("kv", "EMBED_ENGINES"); o.Action != Created {
		t.Errorf("kv: %v, want created", o.Action)
	}
}

func TestProvisionEnginesBucketLockTTL(t *testing.T) {
	s := natstest.RunServer(t)
	ctx := testCtx(t, 20*time.Second)
	js := newJS(t, s.ClientURL())
	if _, err := Provision(ctx, js, DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "EMBED_ENGINES")
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.History() != 1 || st.TTL() != 0 || st.LimitMarkerTTL() != 5*time.Minute {
		t.Errorf("bucket: history %d ttl %v marker ttl %v", st.History(), st.TTL(), st.LimitMarkerTTL())
	}
	// A shape key lives on; a lock key taken with a per-key TTL expires,
	// after which another peer's create (the lock) succeeds.
	if _, err := kv.Put(ctx, "bge-m3.sm86.8x512", []byte("ok")); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "lock.bge-m3.sm86.8x512", []byte("peer-a"), natsjs.KeyTTL(time.Second)); err != nil {
		t.Fatalf("lock with key TTL: %v", err)
	}
	if _, err := kv.Create(ctx, "lock.bge-m3.sm86.8x512", []byte("peer-b")); !errors.Is(err, natsjs.ErrKeyExists) {
		t.Fatalf("second lock: err = %v, want ErrKeyExists", err)
	}
	natstest.CheckFor(t, 5*time.Second, 50*time.Millisecond, func() error {
		_, err := kv.Create(ctx, "lock.bge-m3.sm86.8x512", []byte("peer-b"))
		return err
	})
	if e, err := kv.Get(ctx, "bge-m3.sm86.8x512"); err != nil || string(e.Value()) != "ok" {
		t.Errorf("shape key: %v, %v", e, err)
	}
}

func TestProvisionDLQCapturesMaxDeliveries(t *testing.T) {
	s := natstest.RunServer(t)
	ctx := testCtx(t, 20*time.Second)
	js := newJS(t, s.ClientURL())
	cfg := DefaultConfig()
	cfg.Consumer.MaxDeliver = 1
	cfg.Consumer.BackOff = nil
	if _, err := Provision(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "embed.jobs.x", []byte("job")); err != nil {
		t.Fatal(err)
	}
	c, err := js.Consumer(ctx, "EMBED_JOBS", "embedder")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := c.Next(natsjs.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// A NAK asks for redelivery, which MaxDeliver 1 forbids: the server
	// gives up and sends the advisory.
	if err := msg.Nak(); err != nil {
		t.Fatal(err)
	}
	dlq, err := js.Stream(ctx, "EMBED_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		// The server notices the exhausted job when it next looks for
		// something to deliver, so keep a pull request waiting.
		if again, err := c.Next(natsjs.FetchMaxWait(100 * time.Millisecond)); err == nil {
			return errors.New("job redelivered beyond MaxDeliver: " + string(again.Data()))
		}
		m, err := dlq.GetLastMsgForSubject(ctx, cfg.MaxDeliveriesSubject())
		if err != nil {
			return err
		}
		if !strings.Contains(string(m.Data), `"stream_seq":1`) {
			return errors.New("advisory without the job's stream sequence: " + string(m.Data))
		}
		return nil
	})
}
