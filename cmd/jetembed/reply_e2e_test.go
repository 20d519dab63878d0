package main

// End-to-end proofs of the reply policy (issue 11, points 1 and 4) through
// a real `jetembed serve` and an in-process nats-server: a reply subject
// that is not a short literal inside the allow-list is dead-lettered as
// bad_reply, no result goes anywhere, the connection stays up and serve
// carries on; and results dedupe on the job's identity, not its bare id.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/fleet"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// replyRig is a serve on a fresh server, with a connection that watches
// every dead letter and every result.
type replyRig struct {
	t     *testing.T
	s     *served
	nc    *nats.Conn
	js    natsjs.JetStream
	dlq   *nats.Subscription
	model string
}

func newReplyRig(t *testing.T, extra ...string) *replyRig {
	t.Helper()
	srv := natstest.RunServer(t)
	s := startServe(t, srv.ClientURL(), extra...)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	dlq, err := nc.SubscribeSync("embed.dlq.>")
	if err != nil {
		t.Fatal(err)
	}
	return &replyRig{t: t, s: s, nc: nc, js: js, dlq: dlq, model: logValue(s.log.String(), "ready", "model")}
}

// publish queues a JSON job body of tenant "reply" (on embed.jobs.reply)
// with the given headers (no Nats-Msg-Id unless h has one, as `nats pub`
// sends it).
func (r *replyRig) publish(h nats.Header, body string) {
	r.t.Helper()
	r.publishAs("reply", h, body)
}

// publishAs is publish for another tenant.
func (r *replyRig) publishAs(tenant string, h nats.Header, body string) {
	r.t.Helper()
	if h == nil {
		h = nats.Header{}
	}
	h.Set(schema.HeaderContentType, schema.MediaTypeJSON)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := r.js.PublishMsg(ctx, &nats.Msg{Subject: "embed.jobs." + tenant, Header: h, Data: []byte(body)}); err != nil {
		r.t.Fatalf("publish job: %v", err)
	}
}

// deadLetter waits for the next dead letter and checks that it is job id's,
// with code bad_reply and bounded headers.
func (r *replyRig) deadLetter(id string) *nats.Msg {
	r.t.Helper()
	return r.deadLetterCode(id, schema.CodeBadReply)
}

// deadLetterCode is deadLetter for any code.
func (r *replyRig) deadLetterCode(id string, code schema.Code) *nats.Msg {
	r.t.Helper()
	m, err := r.dlq.NextMsg(20 * time.Second)
	if err != nil {
		r.t.Fatalf("job %s: no dead letter: %v", id, err)
	}
	if got := m.Header.Get(jetstream.HeaderDLQJobID); got != id {
		r.t.Errorf("dead letter of job %q, want %q", got, id)
	}
	if got := m.Header.Get(jetstream.HeaderDLQCode); got != string(code) || m.Subject != jetstream.DeadLetterSubject("embed.dlq.", string(code), m.Header.Get(schema.HeaderTenant)) {
		r.t.Errorf("job %s: dead letter on %s with code %q, want %s", id, m.Subject, got, code)
	}
	for k, vs := range m.Header {
		for _, v := range vs {
			if len(v) > 512 {
				r.t.Errorf("job %s: dead letter header %s of %d bytes", id, k, len(v))
			}
		}
	}
	return m
}

// alive fails if serve exited, and proves that it still answers a job.
func (r *replyRig) alive(id string) {
	r.t.Helper()
	select {
	case code := <-r.s.done:
		r.s.done <- code
		r.t.Fatalf("serve exited with %d", code)
	default:
	}
	sub, err := r.nc.SubscribeSync("embed.results.alive." + id)
	if err != nil {
		r.t.Fatal(err)
	}
	defer sub.Unsubscribe()
	r.publishAs("alive", nil, `{"id":"`+id+`","texts":["still here"],"reply":"embed.results.alive.`+id+`"}`)
	m, err := sub.NextMsg(20 * time.Second)
	if err != nil {
		r.t.Fatalf("serve did not answer job %s after the bad replies: %v", id, err)
	}
	checkVectors(r.t, decodeMsg(r.t, m), 1)
	// The same connection: the server never closed it.
	if l := r.s.log.String(); strings.Contains(l, "nats disconnected") || strings.Contains(l, "maximum control line") {
		r.t.Errorf("serve lost its connection:\n%s", l)
	}
}

func TestServeRefusesBadReplies(t *testing.T) {
	r := newReplyRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	long := "embed.results." + strings.Repeat("x", 5000)
	kvKey := fleet.KeyToken(r.model) + ".cpu.b1000000000000000.s8192"

	t.Run("kv poisoning", func(t *testing.T) {
		r.t = t
		r.publish(nil, `{"id":"kv","texts":["poison"],"reply":"$KV.EMBED_ENGINES.`+kvKey+`"}`)
		r.deadLetter("kv")
		// The same through a request's own reply inbox.
		if err := r.nc.PublishMsg(&nats.Msg{Subject: schema.SubjectEmbed, Reply: "$KV.EMBED_ENGINES." + kvKey + "x",
			Header: nats.Header{schema.HeaderContentType: {schema.MediaTypeJSON}},
			Data:   []byte(`{"id":"kv-req","texts":["poison"]}`)}); err != nil {
			t.Fatal(err)
		}
		r.deadLetter("kv-req")
		kv, err := r.js.KeyValue(ctx, "EMBED_ENGINES")
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{kvKey, kvKey + "x"} {
			if e, err := kv.Get(ctx, k); err == nil {
				t.Errorf("a result was written into the engines bucket as %s (%d bytes)", e.Key(), len(e.Value()))
			}
		}
		r.alive("after-kv")
	})
	t.Run("5 KB reply in the body", func(t *testing.T) {
		r.t = t
		r.publish(nil, `{"id":"long-body","texts":["x"],"reply":"`+long+`"}`)
		r.deadLetter("long-body")
		r.alive("after-long-body")
	})
	t.Run("5 KB reply in the header", func(t *testing.T) {
		r.t = t
		r.publish(nats.Header{schema.HeaderReply: {long}}, `{"id":"long-header","texts":["x"]}`)
		r.deadLetter("long-header")
		r.alive("after-long-header")
	})
	t.Run("wildcard header", func(t *testing.T) {
		r.t = t
		sub, err := r.nc.SubscribeSync("a.>")
		if err != nil {
			t.Fatal(err)
		}
		r.publish(nats.Header{schema.HeaderReply: {"a.>"}}, `{"id":"wild","texts":["x"]}`)
		r.deadLetter("wild")
		if m, err := sub.NextMsg(200 * time.Millisecond); err == nil {
			t.Errorf("a result was published on %s", m.Subject)
		}
	})
	t.Run("forged dead letter", func(t *testing.T) {
		r.t = t
		r.publish(nil, `{"id":"forged","texts":["x"],"reply":"embed.dlq.x"}`)
		m := r.deadLetter("forged")
		if m.Subject == "embed.dlq.x" {
			t.Error("the result was published as a dead letter")
		}
		if m, err := r.dlq.NextMsg(200 * time.Millisecond); err == nil {
			t.Errorf("a second dead letter on %s (job %s)", m.Subject, m.Header.Get(jetstream.HeaderDLQJobID))
		}
	})
	r.t = t
	r.alive("at-the-end")
}

// TestServeResultsOfTwoProducersWithOneID: two producers use the job id
// doc-1, each with its own reply subject; both results are stored.
func TestServeResultsOfTwoProducersWithOneID(t *testing.T) {
	r := newReplyRig(t)
	for _, p := range []string{"pa", "pb"} {
		r.publishAs(p, nil, `{"id":"doc-1","texts":["text of `+p+`"],"reply":"embed.results.`+p+`.doc-1"}`)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := r.js.Stream(ctx, "EMBED_RESULTS")
	if err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		info, err := st.Info(ctx, natsjs.WithSubjectFilter("embed.results.>"))
		if err != nil {
			return err
		}
		if info.State.Msgs != 2 {
			return fmt.Errorf("%d results stored (%v), want 2", info.State.Msgs, info.State.Subjects)
		}
		return nil
	})
	for _, p := range []string{"pa", "pb"} {
		m, err := st.GetLastMsgForSubject(ctx, "embed.results."+p+".doc-1")
		if err != nil {
			t.Fatalf("result of %s: %v", p, err)
		}
		res, err := schema.DecodeResult(m.Data, schema.EncodingFor(m.Header.Get(schema.HeaderContentType)))
		if err != nil || res.ID != "doc-1" || len(res.Items) != 1 {
			t.Errorf("result of %s: %v %+v", p, err, res)
		}
		if got := m.Header.Get(schema.HeaderJobID); got != "doc-1" {
			t.Errorf("result of %s: %s header %q", p, schema.HeaderJobID, got)
		}
	}
	// A redelivered job's result still dedupes: the same job identity
	// gives the same Nats-Msg-Id.
	if schema.ResultMsgID("pa", "embed.results.pa.doc-1", "doc-1") == schema.ResultMsgID("pb", "embed.results.pb.doc-1", "doc-1") {
		t.Error("two reply subjects give one result msg id")
	}
}

// TestServeReplyAllowFlag: --reply-allow adds patterns to the tenant's
// space ({tenant} standing for the job's tenant), and a malformed list, a
// --max-reply-bytes over the ceiling or bad tenancy flags are a usage error
// before connecting.
func TestServeReplyAllowFlag(t *testing.T) {
	for _, args := range [][]string{
		{"--reply-allow", "a..b"},
		{"--reply-allow", "$KV.>"},
		{"--max-reply-bytes", "5000"},
		{"--max-reply-bytes", "-1"},
		{"--tenant-token", "-1"},
		{"--tenant-token", "4"}, // embed.jobs.x has no fourth token
		{"--tenant-results-prefix", "a.>"},
		{"--tenant-inbox-prefix", "_IN.x"},
	} {
		code, _, errOut := runCmd(t, context.Background(), append([]string{"serve", "--nats", "nats://127.0.0.1:1", "--http", ""}, args...)...)
		if code != 2 {
			t.Errorf("serve %v: exit %d (%s), want 2 (usage)", args, code, errOut)
		}
	}
	r := newReplyRig(t, "--reply-allow", "custom.>,audit.{tenant}.>", "--max-reply-bytes", "64")
	if !strings.Contains(r.s.log.String(), "every tenant may send results there") {
		t.Errorf("serve did not warn of the unscoped pattern custom.>:\n%s", r.s.log.String())
	}
	sub, err := r.nc.SubscribeSync("custom.>")
	if err != nil {
		t.Fatal(err)
	}
	audit, err := r.nc.SubscribeSync("audit.>")
	if err != nil {
		t.Fatal(err)
	}
	r.publish(nil, `{"id":"ok","texts":["x"],"reply":"custom.ok"}`)
	if m, err := sub.NextMsg(20 * time.Second); err != nil {
		t.Fatalf("no result on custom.ok: %v", err)
	} else {
		checkVectors(t, decodeMsg(t, m), 1)
	}
	r.publish(nil, `{"id":"audit","texts":["x"],"reply":"audit.reply.1"}`)
	if m, err := audit.NextMsg(20 * time.Second); err != nil || m.Subject != "audit.reply.1" {
		t.Fatalf("no result on audit.reply.1: %v", err)
	}
	r.publish(nil, `{"id":"audit-other","texts":["x"],"reply":"audit.other.1"}`)
	r.deadLetter("audit-other")
	r.publish(nil, `{"id":"default","texts":["x"],"reply":"embed.results.x"}`)
	r.deadLetter("default")
	r.publish(nil, `{"id":"long","texts":["x"],"reply":"custom.`+strings.Repeat("y", 60)+`"}`)
	r.deadLetter("long")
}
