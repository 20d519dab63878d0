package consumer

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetembed/jetembed/internal/testkit"
	"github.com/jetembed/jetembed/schema"
)

// TestBadReply: a reply the policy refuses, from the body, the Embed-Reply
// header or the request's inbox, gets no result anywhere: the job is
// dead-lettered as bad_reply and TERMed, with bounded dead-letter headers,
// and the consumer goes on with the next job.
func TestBadReply(t *testing.T) {
	long := "embed.results." + strings.Repeat("x", 5000)
	cases := []struct {
		name, field, header, inbox string
		respond                    bool
	}{
		{name: "kv in the body", field: "$KV.EMBED_ENGINES.m.cpu.b1000000000000000.s8192"},
		{name: "5 KB in the body", field: long},
		{name: "5 KB in the header", header: long},
		{name: "wildcard header", header: "a.>"},
		{name: "forged dead letter", field: "embed.dlq.x"},
		{name: "jobs subject in the header", header: "embed.jobs.again"},
		{name: "outside the allow-list", field: "orders.delete"},
		{name: "invalid body reply", field: "a b"},
		{name: "body wins over a good header", field: "$JS.API.STREAM.DELETE.X", header: "embed.results.t.ok"},
		{name: "core request inbox", inbox: "$KV.EMBED_ENGINES.x"},
		{name: "micro request inbox", inbox: "$KV.EMBED_ENGINES.x", respond: true},
		{name: "micro request inbox on the service subject", inbox: "embed.v1.embed", respond: true},
		{name: "micro request inbox too long", inbox: "_INBOX." + strings.Repeat("i", 300), respond: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, Config{Replies: schema.ReplyPolicy{}.WithDefaults()}, nil, nil)
			j := schema.NewJob("j", "x")
			j.Reply = tc.field
			d, m := delivery(t, j, schema.EncodingJSON, 1)
			if tc.header != "" {
				d.Header[schema.HeaderReply] = []string{tc.header}
			}
			d.Reply = tc.inbox
			responded := false
			var del Delivery = d
			if tc.respond {
				d.Msg = nil
				del = asRequest(d, func(map[string][]string, []byte) error { responded = true; return nil })
			}
			if err := r.c.Submit(context.Background(), del); err != nil {
				t.Fatal(err)
			}
			if !tc.respond {
				if calls := m.wait(t); len(calls) != 1 || calls[0] != "term" {
					t.Errorf("message settled %v, want term", calls)
				}
			}
			if res := r.pub.Results(); len(res) != 0 || responded {
				t.Errorf("a result was sent (%d published, responded %v)", len(res), responded)
			}
			dl := r.pub.DLQ()
			if len(dl) != 1 || dl[0].Code != string(schema.CodeBadReply) || dl[0].JobID != "j" || dl[0].MsgID == "" {
				t.Fatalf("dead letters %+v, want one bad_reply of job j with a msg id", dl)
			}
			if len(dl[0].Message) > 200 {
				t.Errorf("dead letter message of %d bytes", len(dl[0].Message))
			}
			for k, vs := range r.pub.dlqHeaders[0] {
				for _, v := range vs {
					if len(v) > schema.DefaultMaxReplyBytes+3 {
						t.Errorf("dead letter header %s of %d bytes", k, len(v))
					}
				}
			}
			// The consumer goes on.
			ok := schema.NewJob("ok", "y")
			ok.Reply = "embed.results." + testTenant + ".ok"
			r.submit(t, ok, schema.EncodingMsgpack)
			r.resultFor(t, "ok")
		})
	}
}

// TestRequestInboxTenancy: a request is answered on its own inbox only
// inside the requester's space (the tenant its subject names); any other
// inbox gets no answer at all, a bad_reply dead letter and a metric.
func TestRequestInboxTenancy(t *testing.T) {
	for _, c := range []struct {
		tenant, inbox string
		answered      bool
	}{
		{"producer-a", "_INBOX_producer-a.abc", true},
		{"producer-a", "embed.results.producer-a.viareq", true},
		{"producer-a", "_INBOX_producer-b.guess.1", false},
		{"producer-a", "embed.results.producer-b.viareq", false},
		{"producer-a", "orders.create", false},
		{"producer-a", "_INBOX.abc", false},
		{"", "_INBOX.abc", true},
		{"", "_INBOX_producer-a.abc", false},
		{"", "embed.results.producer-a.x", false},
		{"pa*", "_INBOX_pa*.x", false},
	} {
		t.Run(c.tenant+"/"+c.inbox, func(t *testing.T) {
			r := newRig(t, Config{Replies: schema.ReplyPolicy{}.WithDefaults()}, nil, nil)
			d, _ := delivery(t, schema.NewJob("j", "x"), schema.EncodingJSON, 1)
			d.Msg, d.Reply, d.Subject = nil, c.inbox, "embed.v1.embed."+c.tenant
			answered := make(chan []byte, 1)
			rq := asRequest(d, func(_ map[string][]string, data []byte) error { answered <- data; return nil })
			rq.Tenant = c.tenant
			if err := r.c.Submit(context.Background(), rq); err != nil {
				t.Fatal(err)
			}
			if c.answered {
				res, err := schema.DecodeResult(<-answered, schema.EncodingJSON)
				if err != nil || res.Err() != nil {
					t.Fatalf("answer: %v %v", err, res)
				}
				return
			}
			natsWait(t, func() bool { return len(r.pub.DLQ()) == 1 })
			if dl := r.pub.DLQ(); dl[0].Code != string(schema.CodeBadReply) || dl[0].Tenant != c.tenant && schema.ValidTenant(c.tenant) {
				t.Errorf("dead letter %+v, want bad_reply of tenant %q", dl[0], c.tenant)
			}
			select {
			case data := <-answered:
				t.Fatalf("answered %s", data)
			default:
			}
			if r.met.get("term bad_reply") != 1 {
				t.Errorf("metrics %v", r.met)
			}
		})
	}
}

// natsWait polls cond for up to 5 s.
func natsWait(t *testing.T, cond func() bool) {
	t.Helper()
	testkit.CheckFor(t, 5*time.Second, 2*time.Millisecond, func() error {
		if !cond() {
			return errors.New("not yet")
		}
		return nil
	})
}

// TestQueuedJobTenancy: a queued job's tenant is its subject's token, never
// its body: a reply into another tenant's results is bad_reply, and a job
// whose subject has no tenant token is refused.
func TestQueuedJobTenancy(t *testing.T) {
	for _, c := range []struct {
		subject, reply string
		ok             bool
	}{
		{"embed.jobs.producer-a.run.doc-1", "embed.results.producer-a.run.doc-1", true},
		{"embed.jobs.producer-a", "_INBOX_producer-a.x", true},
		{"embed.jobs.producer-a", "embed.results.producer-b.doc-1", false},
		{"embed.jobs.producer-a", "_INBOX_producer-b.x", false},
		{"embed.jobs.producer-a", "_INBOX.x", false},
		{"embed.jobs", "embed.results.producer-a.x", false},
		{"", "embed.results.producer-a.x", false},
	} {
		t.Run(c.subject+"->"+c.reply, func(t *testing.T) {
			r := newRig(t, Config{Replies: schema.ReplyPolicy{}.WithDefaults()}, nil, nil)
			j := schema.NewJob("doc-1", "x")
			j.Reply = c.reply
			d, m := delivery(t, j, schema.EncodingMsgpack, 1)
			d.Subject = c.subject
			if err := r.c.Submit(context.Background(), d); err != nil {
				t.Fatal(err)
			}
			calls := m.wait(t)
			if c.ok {
				if len(calls) != 1 || calls[0] != "ack" || len(r.pub.Results()) != 1 {
					t.Fatalf("calls %v, results %d", calls, len(r.pub.Results()))
				}
				p := r.pub.Results()[0]
				if want := schema.ResultMsgID("producer-a", c.reply, "doc-1"); p.msgID != want || p.header[schema.HeaderTenant][0] != "producer-a" {
					t.Errorf("result msg id %s, tenant %v; want %s, producer-a", p.msgID, p.header[schema.HeaderTenant], want)
				}
				return
			}
			if len(calls) != 1 || calls[0] != "term" || len(r.pub.Results()) != 0 {
				t.Fatalf("calls %v, results %d: want term and no result", calls, len(r.pub.Results()))
			}
			if dl := r.pub.DLQ(); len(dl) != 1 || dl[0].Code != string(schema.CodeBadReply) {
				t.Errorf("dead letters %+v", dl)
			}
		})
	}
	// Tenancy off: one shared space, as before tenants.
	r := newRig(t, Config{Replies: schema.ReplyPolicy{Tenancy: schema.Tenancy{Off: true}}.WithDefaults()}, nil, nil)
	j := schema.NewJob("doc-1", "x")
	j.Reply = "embed.results.anyone.doc-1"
	d, m := delivery(t, j, schema.EncodingMsgpack, 1)
	d.Subject = "jobs"
	if err := r.c.Submit(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if calls := m.wait(t); len(calls) != 1 || calls[0] != "ack" {
		t.Errorf("tenancy off: calls %v", calls)
	}
}

// TestDeadLetterIDs: one job's dead letter has one id however often it is
// terminated; two jobs sharing an id but not their reply have two.
func TestDeadLetterIDs(t *testing.T) {
	mk := func(tenant, reply string) *job {
		j := schema.NewJob("doc-1", "x")
		j.Reply = reply
		d, _ := delivery(t, j, schema.EncodingJSON, 1)
		d.Subject = "embed.jobs." + tenant
		return &job{a: &d.Arrival, inbox: d.Reply, id: "doc-1", tenant: tenant}
	}
	a, a2, b := mk("pa", "embed.results.pa.doc-1"), mk("pa", "embed.results.pa.doc-1"), mk("pa", "embed.results.pb.doc-1")
	if deadLetterID("bad_payload", a) != deadLetterID("bad_payload", a2) {
		t.Error("the same job gets two dead-letter ids")
	}
	if deadLetterID("bad_payload", a) == deadLetterID("bad_payload", b) {
		t.Error("two producers' jobs with one id share a dead-letter id")
	}
	// Another tenant sending the very same body (reply, id) never makes
	// the victim's dead letter a duplicate of its own.
	if deadLetterID("bad_reply", mk("pb", "embed.results.pa.doc-1")) == deadLetterID("bad_reply", a) {
		t.Error("two tenants' identical jobs share a dead-letter id")
	}
	if deadLetterID("bad_payload", a) == deadLetterID("internal", a) {
		t.Error("two codes share a dead-letter id")
	}
}

// TestJobTenantTooLong: a job whose subject names a tenant over
// schema.MaxTenantBytes (a usage event could not carry it) is refused
// bad_reply on its first delivery and terminated: no result, no model run,
// no redelivery.
func TestJobTenantTooLong(t *testing.T) {
	u := &fakeUsage{}
	r := newRig(t, Config{Replies: schema.ReplyPolicy{}.WithDefaults(), Usage: u, Delivery: DeliveryLimits{MaxDeliver: 5}}, nil, nil)
	long := strings.Repeat("t", schema.MaxTenantBytes+1)
	d, m := delivery(t, schema.NewJob("j", "x"), schema.EncodingJSON, 1)
	d.Subject = "embed.jobs." + long + ".run.j"
	if err := r.c.Submit(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if calls := m.wait(t); !slices.Equal(calls, []string{"term"}) {
		t.Fatalf("message settled %v, want [term]", calls)
	}
	if res := r.pub.Results(); len(res) != 0 {
		t.Errorf("%d results published", len(res))
	}
	if dl := r.pub.DLQ(); len(dl) != 1 || dl[0].Code != string(schema.CodeBadReply) {
		t.Errorf("dead letters %+v, want one bad_reply", dl)
	}
	r.emb.mu.Lock()
	defer r.emb.mu.Unlock()
	if len(r.emb.calls) != 0 {
		t.Errorf("the engine ran %d calls", len(r.emb.calls))
	}
}
