package consumer

import (
	"context"
	"strings"
	"testing"

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
		{name: "body wins over a good header", field: "$JS.API.STREAM.DELETE.X", header: "embed.results.ok"},
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
			if tc.respond {
				d.Msg = nil
				d.Respond = func(map[string][]string, []byte) error { responded = true; return nil }
			}
			if err := r.c.Submit(context.Background(), d); err != nil {
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
			ok.Reply = "embed.results.ok"
			r.submit(t, ok, schema.EncodingMsgpack)
			r.resultFor(t, "ok")
		})
	}
}

// TestRequestInboxOutsideTheAllowList: a request is answered on its own
// inbox even under a custom prefix that the allow-list does not name.
func TestRequestInboxOutsideTheAllowList(t *testing.T) {
	r := newRig(t, Config{Replies: schema.ReplyPolicy{}.WithDefaults()}, nil, nil)
	d, _ := delivery(t, schema.NewJob("j", "x"), schema.EncodingJSON, 1)
	d.Msg, d.Reply = nil, "_INBOX_producer-a.abc"
	answered := make(chan []byte, 1)
	d.Respond = func(_ map[string][]string, data []byte) error { answered <- data; return nil }
	if err := r.c.Submit(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	res, err := schema.DecodeResult(<-answered, schema.EncodingJSON)
	if err != nil || res.Err() != nil {
		t.Fatalf("answer: %v %v", err, res)
	}
}

// TestDeadLetterIDs: one job's dead letter has one id however often it is
// terminated; two jobs sharing an id but not their reply have two.
func TestDeadLetterIDs(t *testing.T) {
	mk := func(reply string) *job {
		j := schema.NewJob("doc-1", "x")
		j.Reply = reply
		d, _ := delivery(t, j, schema.EncodingJSON, 1)
		return &job{d: d, id: "doc-1"}
	}
	a, a2, b := mk("embed.results.pa.doc-1"), mk("embed.results.pa.doc-1"), mk("embed.results.pb.doc-1")
	if deadLetterID("bad_payload", a) != deadLetterID("bad_payload", a2) {
		t.Error("the same job gets two dead-letter ids")
	}
	if deadLetterID("bad_payload", a) == deadLetterID("bad_payload", b) {
		t.Error("two producers' jobs with one id share a dead-letter id")
	}
	if deadLetterID("bad_payload", a) == deadLetterID("internal", a) {
		t.Error("two codes share a dead-letter id")
	}
}
