package jetstream_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/schema"
)

func TestClientResultsAndSubjects(t *testing.T) {
	srv := newServer(t, nil)
	c, err := client.New(srv.nc, client.WithRun("my run.1"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Run() != "my_run_1" || c.JobSubject("a.b") != "embed.jobs.my_run_1.~YS5i" {
		t.Errorf("run %q, job subject %q", c.Run(), c.JobSubject("a.b"))
	}
	if got := c.ReplySubject("a.b"); got != "embed.results.my_run_1.~YS5i" {
		t.Errorf("reply subject of id a.b: %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Nothing stored: caught up at once.
	for sr, err := range c.Results(ctx, c.Run(), client.UntilCaughtUp()) {
		t.Fatalf("empty run yielded %v, %v", sr, err)
	}
	good, _ := schema.EncodeResult(&schema.Result{V: 1, ID: "x"}, schema.EncodingMsgpack)
	publishRaw(t, srv.js, c.ReplySubject("bad"), fleetHeader("", c.ReplySubject("bad"), "bad"), []byte("\xc1"))
	// A result the fleet did not write (no identity, or another job's or
	// tenant's) is nobody's result.
	publishRaw(t, srv.js, c.ReplySubject("x"), nil, good)
	publishRaw(t, srv.js, c.ReplySubject("x"), fleetHeader("", c.ReplySubject("y"), "x"), good)
	publishRaw(t, srv.js, c.ReplySubject("x"), fleetHeader("someone", c.ReplySubject("x"), "x"), good)
	publishRaw(t, srv.js, c.ReplySubject("x"), fleetHeader("", c.ReplySubject("x"), "x"), good)
	publishRaw(t, srv.js, "embed.results.other.x", nil, good)
	var ids []string
	var bad, foreign int
	var last uint64
	for sr, err := range c.Results(ctx, c.Run(), client.UntilCaughtUp()) {
		switch {
		case errors.Is(err, client.ErrForeignResult):
			foreign++
			if sr.Result != nil {
				t.Errorf("a foreign result yielded with its body: %+v", sr.Result)
			}
		case errors.Is(err, client.ErrBadResult):
			bad++
		case err != nil:
			t.Fatal(err)
		default:
			ids = append(ids, sr.ID)
			last = sr.Sequence
		}
	}
	if bad != 1 || foreign != 3 || len(ids) != 1 || ids[0] != "x" {
		t.Errorf("yielded %v, %d undecodable and %d foreign, want [x], 1 and 3", ids, bad, foreign)
	}
	// After the last one read there is nothing more of this run.
	short, cancel2 := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel2()
	for sr, err := range c.Results(short, c.Run(), client.AfterSequence(last)) {
		if err == nil {
			t.Errorf("after seq %d: yielded %s", last, sr.ID)
		} else if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("after seq %d: %v", last, err)
		}
	}
}

func TestClientSubmitCarriesTraceContext(t *testing.T) {
	srv := newServer(t, nil)
	c, err := client.New(srv.nc, client.WithRun("traced"), client.WithJSON())
	if err != nil {
		t.Fatal(err)
	}
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled,
	}))
	if _, err := c.Submit(ctx, schema.NewJob("t1", "traced text")); err != nil {
		t.Fatal(err)
	}
	st, err := srv.js.Stream(ctx, srv.cfg.Jobs.Name)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	h := stored.Header
	var parent string
	for k, v := range h {
		if strings.EqualFold(k, "traceparent") && len(v) > 0 {
			parent = v[0]
		}
	}
	if !strings.Contains(parent, "4bf92f3577b34da6a3ce929d0e0e4736") {
		t.Errorf("job headers %v carry no traceparent of the caller's span", h)
	}
	if h.Get(schema.HeaderMsgID) != "" || h.Get(schema.HeaderExpectedLastSubjectSeq) != "0" || h.Get(schema.HeaderContentType) != schema.MediaTypeJSON {
		t.Errorf("job headers %v", h)
	}
	job, err := schema.DecodeJob(stored.Data, schema.EncodingJSON)
	if err != nil || job.Reply != c.ReplySubject("t1") {
		t.Errorf("stored job %+v (%v): want reply %s", job, err, c.ReplySubject("t1"))
	}
}

// Two producers that pick the same job id (each with its own run, so its own
// reply subject) both get their job queued; the same producer submitting it
// again is deduplicated by the jobs stream.
func TestClientSubmitSameIDTwoProducers(t *testing.T) {
	srv := newServer(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var acks []bool
	for _, run := range []string{"a", "b", "a"} {
		c, err := client.New(srv.nc, client.WithRun(run))
		if err != nil {
			t.Fatal(err)
		}
		ack, err := c.Submit(ctx, schema.NewJob("doc-1", "hello"))
		if err != nil {
			t.Fatalf("run %s: %v", run, err)
		}
		acks = append(acks, ack.Duplicate)
	}
	if acks[0] || acks[1] || !acks[2] {
		t.Errorf("duplicate flags of producer a, producer b, producer a again = %v, want [false false true]", acks)
	}
}

// TestClientResultsSurviveALostConsumer: the results reader is an
// ephemeral push consumer; when it is deleted under it (a server restart
// loses it, an operator removes it), the reader creates another from the
// next sequence and misses nothing, and a result delivered from outside
// the run's subjects (a consumer re-pointed by someone else) is refused.
func TestClientResultsSurviveALostConsumer(t *testing.T) {
	srv := newServer(t, nil)
	c, err := client.New(srv.nc, client.WithTenant("pa"), client.WithRun("r"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.ReplySubject("x"); got != "embed.results.pa.r.x" || c.JobSubject("x") != "embed.jobs.pa.r.x" || c.Endpoint() != "embed.v1.embed.pa" {
		t.Fatalf("subjects %s %s %s", got, c.JobSubject("x"), c.Endpoint())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	result := func(id string) []byte {
		data, _ := schema.EncodeResult(&schema.Result{V: 1, ID: id}, schema.EncodingMsgpack)
		return data
	}
	publishRaw(t, srv.js, c.ReplySubject("one"), fleetHeader("pa", c.ReplySubject("one"), "one"), result("one"))
	got := make(chan string, 8)
	go func() {
		for sr, err := range c.Results(ctx, "r") {
			if err != nil {
				got <- "error: " + err.Error()
				continue
			}
			got <- sr.ID
		}
	}()
	next := func() string {
		select {
		case id := <-got:
			return id
		case <-ctx.Done():
			t.Fatal("no result")
		}
		return ""
	}
	if id := next(); id != "one" {
		t.Fatalf("first %q", id)
	}
	st, err := srv.js.Stream(ctx, srv.cfg.Results.Name)
	if err != nil {
		t.Fatal(err)
	}
	names := st.ConsumerNames(ctx)
	var deleted int
	for name := range names.Name() {
		if err := st.DeleteConsumer(ctx, name); err != nil {
			t.Fatal(err)
		}
		deleted++
	}
	if deleted != 1 {
		t.Fatalf("%d consumers deleted, want the reader's one", deleted)
	}
	publishRaw(t, srv.js, c.ReplySubject("two"), fleetHeader("pa", c.ReplySubject("two"), "two"), result("two"))
	if id := next(); id != "two" {
		t.Fatalf("after the consumer was lost: %q", id)
	}
	// Re-point the reader's consumer at another tenant's results, as
	// anyone allowed to create consumers of any name could.
	for name := range st.ConsumerNames(ctx).Name() {
		cons, err := st.PushConsumer(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := cons.CachedInfo().Config
		cfg.FilterSubject = "embed.results.pb.>"
		if _, err := srv.js.UpdatePushConsumer(ctx, srv.cfg.Results.Name, cfg); err != nil {
			t.Fatal(err)
		}
	}
	publishRaw(t, srv.js, "embed.results.pb.r.three", nil, result("three"))
	if id := next(); !strings.Contains(id, "not a result of this run") {
		t.Fatalf("a result of another tenant's was read as the run's: %q", id)
	}
}
