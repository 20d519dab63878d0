package consumer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/schema"
)

// TestDeadLetterExcerpt is reproduction 4 of issue 21 at the consumer: the
// dead letter of a job that can never succeed keeps its first 4 KiB (body
// and headers), with the body's size and SHA-256; one whose retries ran
// out keeps the whole job, to be replayed.
func TestDeadLetterExcerpt(t *testing.T) {
	big := strings.Repeat("x", 200<<10)
	cases := []struct {
		name    string
		body    func(t *testing.T) []byte
		n       uint64
		code    string
		huge    bool // a header of 200 KiB
		excerpt bool
	}{
		{"bad_payload", func(*testing.T) []byte { return []byte(`{"v":1,"id":"bad","texts":[` + big) }, 1, "bad_payload", false, true},
		{"job_too_large", func(t *testing.T) []byte { return encodeJob(t, schema.NewJob("big", big, big)) }, 1, "job_too_large", true, true},
		{"small-bad-payload", func(*testing.T) []byte { return []byte(`{"v":1,"id":"small",`) }, 1, "bad_payload", false, false},
		{"huge-header", func(*testing.T) []byte { return []byte(`{"v":1,"id":"small",`) }, 1, "bad_payload", true, true},
		{"retries-exhausted", func(t *testing.T) []byte { return encodeJob(t, schema.NewJob("tired", big[:100<<10])) }, 5, "overloaded", true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			emb := &fakeEmb{callErr: func([]engine.Text) error { return schema.Errorf(schema.CodeOverloaded, "full") }}
			r := newRig(t, Config{Delivery: DeliveryLimits{MaxDeliver: 5}, Limits: schema.Limits{MaxJobBytes: 300 << 10}}, emb, nil)
			body := tc.body(t)
			m := newMsg()
			d := Delivery{Msg: m, Data: body, NumDelivered: tc.n, Subject: "embed.jobs." + testTenant, Header: map[string][]string{
				schema.HeaderContentType: {"application/json"},
				"Embed-Subject":          {"embed.jobs." + testTenant}, // as jetstream's adapter sets it
			}}
			if tc.huge {
				d.Header["X-Huge"] = []string{big}
			}
			if err := r.c.Submit(context.Background(), d); err != nil {
				t.Fatal(err)
			}
			m.wait(t)
			dlq := r.pub.DLQ()
			if len(dlq) != 1 {
				t.Fatalf("%d dead letters", len(dlq))
			}
			dl, h, data := dlq[0], r.pub.dlqHeaders[0], r.pub.dlqData[0]
			sum := sha256.Sum256(body)
			if dl.Code != tc.code || dl.BodySize != len(body) || dl.BodySHA256 != hex.EncodeToString(sum[:]) || dl.Excerpt != tc.excerpt {
				t.Errorf("letter %+v: want code %s, size %d, excerpt %v", dl, tc.code, len(body), tc.excerpt)
			}
			hb := 0
			for k, vs := range h {
				for _, v := range vs {
					hb += len(k) + len(v)
				}
			}
			if tc.excerpt || tc.code != "overloaded" {
				if len(data) > DLQExcerptBytes || hb > DLQExcerptBytes {
					t.Errorf("kept %d body bytes and %d header bytes, want at most %d each", len(data), hb, DLQExcerptBytes)
				}
				if string(data) != string(body[:min(len(body), DLQExcerptBytes)]) {
					t.Error("the body kept is not the body's start")
				}
				if got := header(h, "Embed-Subject"); got != "embed.jobs."+testTenant {
					t.Errorf("subject header %q", got)
				}
				return
			}
			if string(data) != string(body) || len(h["X-Huge"]) != 1 || h["X-Huge"][0] != big {
				t.Errorf("letter of %d body bytes, want the whole job (%d) and its headers", len(data), len(body))
			}
		})
	}
}

// TestResultTooLarge: a job whose encoded result exceeds MaxResultBytes
// fails result_too_large (error result, DLQ excerpt, TERM) on its first
// delivery, even when the embedder did not foresee it.
func TestResultTooLarge(t *testing.T) {
	r := newRig(t, Config{MaxResultBytes: 1000, Delivery: DeliveryLimits{MaxDeliver: 5}}, nil, nil)
	j := schema.NewJob("huge", strings.Repeat("a", 200), strings.Repeat("b", 200))
	j.Outputs = []schema.Output{schema.OutputDense, schema.OutputColBERT}
	j.Reply = "r"
	if got := r.submit(t, j, schema.EncodingJSON); len(got) != 1 || got[0] != "term" {
		t.Fatalf("calls %v, want [term]", got)
	}
	res, p := r.resultFor(t, "huge")
	if res.Error == nil || res.Error.Code != schema.CodeResultTooLarge || res.Error.Retriable {
		t.Fatalf("result %+v", res)
	}
	if h := p.header[schema.HeaderErrorCode]; len(h) != 1 || h[0] != "result_too_large" {
		t.Errorf("error code header %v", h)
	}
	if dlq := r.pub.DLQ(); len(dlq) != 1 || dlq[0].Code != "result_too_large" {
		t.Errorf("dead letters %+v", dlq)
	}
	small := schema.NewJob("small", "a")
	small.Reply = "r"
	if got := r.submit(t, small, schema.EncodingMsgpack); len(got) != 1 || got[0] != "ack" {
		t.Fatalf("small job: calls %v, want [ack]", got)
	}
}

// TestReplayIdentity: a job replayed from the DLQ (Embed-Replay) has a
// result dedupe id (and blob name) of its own, so the results stream keeps
// its result beside the first run's, and a new dead letter if it fails
// again.
func TestReplayIdentity(t *testing.T) {
	r := newRig(t, Config{}, nil, nil)
	j := schema.NewJob("again", "text")
	j.Reply = "embed.results." + testTenant + ".again"
	d, m := delivery(t, j, schema.EncodingMsgpack, 1)
	d.Header[schema.HeaderReplay] = []string{"dlq-0123"}
	if err := r.c.Submit(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	m.wait(t)
	res := r.pub.Results()
	plain := schema.ResultMsgID(testTenant, j.Reply, j.ID)
	if len(res) != 1 || res[0].msgID == plain || !strings.HasPrefix(res[0].msgID, plain+"-") || res[0].header[schema.HeaderMsgID][0] != res[0].msgID {
		t.Errorf("replayed result msg id %q (header %v), want %s-<replay hash>", res[0].msgID, res[0].header[schema.HeaderMsgID], plain)
	}
	jj := &job{id: "x", d: Delivery{Data: []byte("body")}}
	first := deadLetterID("bad_payload", jj)
	jj.d.Header = map[string][]string{schema.HeaderReplay: {"dlq-1"}}
	if deadLetterID("bad_payload", jj) == first {
		t.Error("a replayed job's dead letter has the first run's id: it would be dropped as a duplicate")
	}
}

func encodeJob(t *testing.T, j *schema.Job) []byte {
	t.Helper()
	data, err := schema.EncodeJob(j, schema.EncodingJSON)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
