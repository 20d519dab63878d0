package consumer

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/schema"
)

func ptr[T any](v T) *T { return &v }

// TestBadInput: every job-level refusal gets an error result, a DLQ copy
// and a TERM, and never reaches the embedder.
func TestBadInput(t *testing.T) {
	cases := []struct {
		name string
		edit func(j *schema.Job, d *Delivery)
		code schema.Code
	}{
		{"bad_version", func(j *schema.Job, _ *Delivery) { j.V = 2 }, schema.CodeBadVersion},
		{"missing_id", func(j *schema.Job, _ *Delivery) { j.ID = "" }, schema.CodeMissingID},
		{"long id", func(j *schema.Job, _ *Delivery) { j.ID = strings.Repeat("i", 300) }, schema.CodeBadPayload},
		{"bad deadline", func(j *schema.Job, _ *Delivery) { j.Deadline = "tomorrow" }, schema.CodeBadPayload},
		{"bad deadline header", func(_ *schema.Job, d *Delivery) { d.Header[schema.HeaderDeadline] = []string{"soon"} }, schema.CodeBadPayload},
		{"empty_job", func(j *schema.Job, _ *Delivery) { j.Texts = nil }, schema.CodeEmptyJob},
		{"too_many_texts", func(j *schema.Job, _ *Delivery) { j.Texts = []string{"a", "b", "c", "d"} }, schema.CodeTooManyTexts},
		{"job_too_large text", func(j *schema.Job, _ *Delivery) { j.Texts = []string{strings.Repeat("x", 200)} }, schema.CodeJobTooLarge},
		{"job_too_large payload", func(j *schema.Job, _ *Delivery) {
			j.Meta = map[string]any{"pad": strings.Repeat("m", 2000)}
		}, schema.CodeJobTooLarge},
		{"unknown_output", func(j *schema.Job, _ *Delivery) { j.Outputs = []schema.Output{"fancy"} }, schema.CodeUnknownOutput},
	}
	limits := schema.Limits{MaxTexts: 3, MaxTextBytes: 100, MaxJobBytes: 1000}
	for _, enc := range []schema.Encoding{schema.EncodingJSON, schema.EncodingMsgpack} {
		for _, tc := range cases {
			t.Run(enc.String()+"/"+tc.name, func(t *testing.T) {
				r := newRig(t, Config{Limits: limits}, nil, nil)
				j := schema.NewJob("bad-1", "hello")
				j.Reply = "r.bad"
				j.Meta = map[string]any{"k": "v"}
				tc.edit(j, &Delivery{Header: map[string][]string{}})
				d, m := delivery(t, j, enc, 2)
				tc.edit(&schema.Job{}, &d)
				if err := r.c.Submit(context.Background(), d); err != nil {
					t.Fatal(err)
				}
				if got := m.wait(t); !slices.Equal(got, []string{"term"}) {
					t.Fatalf("calls %v, want [term]", got)
				}
				if n := len(r.emb.Calls()); n != 0 {
					t.Errorf("embedder called %d times for bad input", n)
				}
				dlq := r.pub.DLQ()
				if len(dlq) != 1 || dlq[0].Code != string(tc.code) || dlq[0].NumDelivered != 2 || dlq[0].Message == "" {
					t.Errorf("dlq %+v, want one %s", dlq, tc.code)
				}
				if j.ID == "bad-1" && tc.name != "job_too_large payload" { // an oversized body is not decoded: no reply known
					res, p := r.resultFor(t, "bad-1")
					if res.Error == nil || res.Error.Code != tc.code || res.Error.Retriable || len(res.Items) != 0 {
						t.Errorf("result error %+v, want %s", res.Error, tc.code)
					}
					if p.subject != "r.bad" || p.header[schema.HeaderErrorCode][0] != string(tc.code) {
						t.Errorf("published to %q with %v", p.subject, p.header)
					}
				}
				if r.met.get("term "+string(tc.code)) != 1 || r.met.get("jobs term "+string(tc.code)) != 1 {
					t.Errorf("metrics %v", r.met)
				}
				if logs := r.log.String(); !strings.Contains(logs, `"level":"WARN"`) || !strings.Contains(logs, `"code":"`+string(tc.code)+`"`) || !strings.Contains(logs, `"verdict":"term","delivered":2`) || strings.Contains(logs, "hello") {
					t.Errorf("log must warn with the code and without texts:\n%s", logs)
				}
			})
		}
	}
}

// TestUndecodable: garbage is answered only where the headers or the
// request say, and always TERMed with a DLQ copy.
func TestUndecodable(t *testing.T) {
	cases := []struct {
		name, header, inbox, want string
		respond                   bool
	}{
		{name: "no reply known"},
		{name: "Embed-Reply header", header: "r.hdr", want: "r.hdr"},
		{name: "request inbox", inbox: "_INBOX.x", want: "_INBOX.x"},
		{name: "request-reply", respond: true},
	}
	for _, tc := range cases {
		for _, enc := range []schema.Encoding{schema.EncodingJSON, schema.EncodingMsgpack} {
			t.Run(tc.name+"/"+enc.String(), func(t *testing.T) {
				r := newRig(t, Config{}, nil, nil)
				m := newMsg()
				d := Delivery{Msg: m, Data: []byte("\xc1{not a job"), NumDelivered: 1, Reply: tc.inbox, Subject: "embed.jobs." + testTenant,
					Header: map[string][]string{schema.HeaderContentType: {enc.ContentType()}, schema.HeaderMsgID: {"hdr-id"}}}
				if tc.header != "" {
					d.Header[schema.HeaderReply] = []string{tc.header}
				}
				var answered []byte
				if tc.respond {
					d.Respond = func(_ map[string][]string, data []byte) error { answered = data; return nil }
				}
				if err := r.c.Submit(context.Background(), d); err != nil {
					t.Fatal(err)
				}
				if got := m.wait(t); !slices.Equal(got, []string{"term"}) {
					t.Fatalf("calls %v, want [term]", got)
				}
				if dlq := r.pub.DLQ(); len(dlq) != 1 || dlq[0].Code != string(schema.CodeBadPayload) || dlq[0].JobID != "hdr-id" {
					t.Errorf("dlq %+v", dlq)
				}
				results := r.pub.Results()
				switch {
				case tc.respond:
					res, err := schema.DecodeResult(answered, enc)
					if err != nil || res.Error == nil || res.Error.Code != schema.CodeBadPayload {
						t.Errorf("answer %+v, %v", res, err)
					}
				case tc.want == "":
					if len(results) != 0 {
						t.Errorf("%d results with no reply known", len(results))
					}
				default:
					res, p := r.resultFor(t, "hdr-id")
					if p.subject != tc.want || res.Error == nil || res.Error.Code != schema.CodeBadPayload {
						t.Errorf("published %+v to %q", res, p.subject)
					}
				}
			})
		}
	}
}

// TestItemErrors: invalid UTF-8 (found by validation) and a text the engine
// fails alone keep the other items; the job is ACKed.
func TestItemErrors(t *testing.T) {
	emb := &fakeEmb{refuse: func(text string) *schema.Error {
		if text == "too long" {
			return schema.Errorf(schema.CodeTextTooLong, "over the model's maximum")
		}
		return nil
	}}
	r := newRig(t, Config{}, emb, nil)
	j := schema.NewJob("j", "first", "bad \xff utf8", "too long", "last")
	j.Truncate = ptr(false)
	j.Reply = "r"
	if got := r.submit(t, j, schema.EncodingMsgpack); !slices.Equal(got, []string{"ack"}) {
		t.Fatalf("calls %v, want [ack]", got)
	}
	calls := emb.Calls()
	if len(calls) != 1 || len(calls[0]) != 3 || calls[0][0].Truncate {
		t.Fatalf("embedder got %+v; want 3 texts (invalid UTF-8 left out), truncate off", calls)
	}
	res, _ := r.resultFor(t, "j")
	codes := make([]schema.Code, len(res.Items))
	for i, it := range res.Items {
		if it.Error != nil {
			codes[i] = it.Error.Code
			if it.Dense != nil {
				t.Errorf("item %d: vectors on a failed item", i)
			}
		} else if it.Dense == nil {
			t.Errorf("item %d: no vector", i)
		}
	}
	if want := []schema.Code{"", schema.CodeInvalidUTF8, schema.CodeTextTooLong, ""}; !slices.Equal(codes, want) {
		t.Errorf("item codes %v, want %v", codes, want)
	}
	if res.Items[3].Dense[0] != 4 {
		t.Errorf("last item has the wrong vector %v", res.Items[3].Dense)
	}
	if r.met.get("texts ok ") != 2 || r.met.get("texts error invalid_utf8") != 1 || r.met.get("texts error text_too_long") != 1 {
		t.Errorf("metrics %v", r.met)
	}
}

// TestRetriable: a retriable refusal of one item, or of the whole call,
// NAKs the whole job with a delay that grows with the delivery count, and
// publishes nothing; the job with it in the batch is unaffected.
func TestRetriable(t *testing.T) {
	cases := []struct {
		name string
		emb  *fakeEmb
		code schema.Code
	}{
		{"item shape_not_warmed", &fakeEmb{refuse: func(text string) *schema.Error {
			if text == "long" {
				return schema.Errorf(schema.CodeShapeNotWarmed, "not warmed")
			}
			return nil
		}}, schema.CodeShapeNotWarmed},
		{"call overloaded", &fakeEmb{callErr: func([]engine.Text) error {
			return schema.Errorf(schema.CodeOverloaded, "busy")
		}}, schema.CodeOverloaded},
		{"engine closed", &fakeEmb{callErr: func([]engine.Text) error { return engine.ErrClosed }}, schema.CodeEngineUnavailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, Config{Delivery: DeliveryLimits{MaxDeliver: 10}}, tc.emb, nil)
			var delays []time.Duration
			for n := uint64(1); n <= 5; n++ {
				j := schema.NewJob("j", "short", "long")
				j.Reply = "r"
				d, m := delivery(t, j, schema.EncodingMsgpack, n)
				if err := r.c.Submit(context.Background(), d); err != nil {
					t.Fatal(err)
				}
				if got := m.wait(t); !slices.Equal(got, []string{"nak+delay"}) {
					t.Fatalf("delivery %d: calls %v", n, got)
				}
				delays = append(delays, m.delays[0])
			}
			want := []time.Duration{100, 200, 400, 800, 1000}
			for i := range want {
				want[i] *= time.Millisecond
			}
			if !slices.Equal(delays, want) {
				t.Errorf("delays %v, want %v", delays, want)
			}
			if n := len(r.pub.Results()); n != 0 {
				t.Errorf("%d results published for NAKed jobs", n)
			}
			if r.met.get("nak "+string(tc.code)) != 5 || r.met.get("jobs nak "+string(tc.code)) != 5 {
				t.Errorf("metrics %v", r.met)
			}
		})
	}
}

// TestMaxDeliver: on the final delivery a retriable refusal becomes a final
// error result (retriable), a DLQ copy and a TERM.
func TestMaxDeliver(t *testing.T) {
	emb := &fakeEmb{refuse: func(string) *schema.Error { return schema.Errorf(schema.CodeShapeNotWarmed, "x") }}
	r := newRig(t, Config{Delivery: DeliveryLimits{MaxDeliver: 3}}, emb, nil)
	j := schema.NewJob("j", "text")
	j.Reply = "r"
	d, m := delivery(t, j, schema.EncodingJSON, 3)
	if err := r.c.Submit(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if got := m.wait(t); !slices.Equal(got, []string{"term"}) {
		t.Fatalf("calls %v, want [term]", got)
	}
	if ev := r.pub.Events(); !slices.Equal(ev, []string{"dlq", "result"}) {
		t.Errorf("events %v: the dead letter must be stored before the result goes out", ev)
	}
	res, _ := r.resultFor(t, "j")
	if res.Error == nil || res.Error.Code != schema.CodeShapeNotWarmed || !res.Error.Retriable {
		t.Errorf("final result error %+v, want retriable shape_not_warmed", res.Error)
	}
	if dlq := r.pub.DLQ(); len(dlq) != 1 || dlq[0].Code != string(schema.CodeShapeNotWarmed) || dlq[0].NumDelivered != 3 {
		t.Errorf("dlq %+v", dlq)
	}
}

// TestDLQFailure: a TERM whose DLQ copy failed becomes a NAK, with no
// result sent, except on the final delivery; a request is answered anyway.
func TestDLQFailure(t *testing.T) {
	for _, tc := range []struct {
		n       uint64
		respond bool
		want    string
		results int
	}{{1, false, "nak+delay", 0}, {5, false, "term", 1}, {1, true, "term", 0}} {
		r := newRig(t, Config{Delivery: DeliveryLimits{MaxDeliver: 5}}, nil, &fakePub{failDLQ: errInjected})
		j := &schema.Job{V: 1, ID: "j", Reply: "r"}
		d, m := delivery(t, j, schema.EncodingJSON, tc.n)
		var answered bool
		if tc.respond {
			d.Respond = func(map[string][]string, []byte) error { answered = true; return nil }
		}
		if err := r.c.Submit(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		if got := m.wait(t); !slices.Equal(got, []string{tc.want}) {
			t.Errorf("delivery %d: calls %v, want %s", tc.n, got, tc.want)
		}
		if n := len(r.pub.Results()); n != tc.results || answered != tc.respond {
			t.Errorf("delivery %d: %d results, answered %v", tc.n, n, answered)
		}
	}
}

// TestDeadline: a job whose deadline (field or header) passed before it was
// picked is answered deadline_exceeded without running, and ACKed.
func TestDeadline(t *testing.T) {
	past := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	cases := []struct {
		name, field, header string
		expired             bool
	}{
		{"field past", past, "", true},
		{"header past", "", past, true},
		{"field future", future, "", false},
		{"header future", "", future, false},
		{"field wins", future, past, false},
		// The zero time is a deadline long past, not "no deadline"
		// (the attack review's "noticed, not tested").
		{"field zero time", "0001-01-01T00:00:00Z", "", true},
		{"header zero time", "", "0001-01-01T00:00:00Z", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, Config{}, nil, nil)
			j := schema.NewJob("j", "text")
			j.Reply, j.Deadline = "r", tc.field
			d, m := delivery(t, j, schema.EncodingJSON, 1)
			if tc.header != "" {
				d.Header[schema.HeaderDeadline] = []string{tc.header}
			}
			if err := r.c.Submit(context.Background(), d); err != nil {
				t.Fatal(err)
			}
			if got := m.wait(t); !slices.Equal(got, []string{"ack"}) {
				t.Fatalf("calls %v, want [ack]", got)
			}
			res, _ := r.resultFor(t, "j")
			ran := len(r.emb.Calls()) == 1
			if tc.expired {
				if ran || res.Error == nil || res.Error.Code != schema.CodeDeadlineExceeded {
					t.Errorf("ran %v, result error %+v; want deadline_exceeded without running", ran, res.Error)
				}
				if r.met.get("jobs error deadline_exceeded") != 1 {
					t.Errorf("metrics %v", r.met)
				}
			} else if !ran || res.Error != nil {
				t.Errorf("ran %v, result error %+v; want a normal result", ran, res.Error)
			}
		})
	}
}

// TestPanic: a panicking embedder is an internal error, not a crash; the
// other jobs (each its own Embed call) succeed; the poison job is NAKed
// with a delay and, on its final delivery, terminated with an internal
// result and a DLQ copy.
func TestPanic(t *testing.T) {
	emb := &fakeEmb{}
	r := newRig(t, Config{Delivery: DeliveryLimits{MaxDeliver: 4}}, emb, nil)
	var msgs []*fakeMsg
	for _, tc := range []struct {
		id, text string
		n        uint64
	}{{"good1", "fine", 1}, {"poison", "panic", 1}, {"good2", "also fine", 1}, {"poison-final", "panic", 4}} {
		j := schema.NewJob(tc.id, tc.text)
		j.Reply = "r"
		d, m := delivery(t, j, schema.EncodingMsgpack, tc.n)
		if err := r.c.Submit(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	want := []string{"ack", "nak+delay", "ack", "term"}
	for i, m := range msgs {
		if got := m.wait(t); !slices.Equal(got, want[i:i+1]) {
			t.Errorf("job %d: calls %v, want %s", i, got, want[i])
		}
	}
	if calls := emb.Calls(); len(calls) != 4 {
		t.Errorf("%d embed calls, want one per job", len(calls))
	}
	res, _ := r.resultFor(t, "poison-final")
	if res.Error == nil || res.Error.Code != schema.CodeInternal || res.Error.Retriable {
		t.Errorf("final poison result %+v", res.Error)
	}
	if dlq := r.pub.DLQ(); len(dlq) != 1 || dlq[0].JobID != "poison-final" || dlq[0].Code != string(schema.CodeInternal) {
		t.Errorf("dlq %+v", dlq)
	}
	if !strings.Contains(r.log.String(), "embedder panicked") {
		t.Error("the panic was not logged")
	}
}
