package schema

import (
	"reflect"
	"testing"
)

func TestJobHeader(t *testing.T) {
	j := NewJob("job-1", "x")
	got := JobHeader(j, EncodingJSON)
	// No Nats-Msg-Id: the jobs stream dedupes ids over every tenant, so an
	// id a producer sends is one another producer can preempt.
	want := map[string][]string{"Content-Type": {"application/json"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("JobHeader = %v, want %v", got, want)
	}
	j.Deadline = "2030-01-01T00:00:00Z"
	if got := JobHeader(j, EncodingMsgpack); got["Embed-Deadline"][0] != j.Deadline || got["Content-Type"][0] != "application/msgpack" {
		t.Errorf("JobHeader with deadline = %v", got)
	}
}

func TestResultHeader(t *testing.T) {
	got := ResultHeader(&Result{V: 1, ID: "j"}, "a", "embed.results.a.j", EncodingMsgpack)
	if _, ok := got["Embed-Error-Code"]; ok || got["Nats-Msg-Id"][0] != ResultMsgID("a", "embed.results.a.j", "j") ||
		got["Embed-Job-Id"][0] != "j" || got["Embed-Tenant"][0] != "a" {
		t.Errorf("ResultHeader(success) = %v", got)
	}
	got = ResultHeader(ErrorResult("j", Errorf(CodeShapeNotWarmed, "later")), "", "r", EncodingJSON)
	if got["Embed-Error-Code"][0] != "shape_not_warmed" || got["Content-Type"][0] != "application/json" || got["Embed-Tenant"] != nil {
		t.Errorf("ResultHeader(error) = %v", got)
	}
	if got := ResultHeader(ErrorResult("", Errorf(CodeMissingID, "no id")), "a", "r", EncodingJSON); got["Nats-Msg-Id"] != nil {
		t.Errorf("ResultHeader(no id) = %v: results of jobs without an id must not dedupe together", got)
	}
}

func TestResultMsgID(t *testing.T) {
	a := ResultMsgID("pa", "embed.results.pa.doc-1", "doc-1")
	if a != ResultMsgID("pa", "embed.results.pa.doc-1", "doc-1") {
		t.Error("ResultMsgID is not stable: redeliveries would not dedupe")
	}
	for _, other := range [][3]string{
		{"pb", "embed.results.pa.doc-1", "doc-1"}, // another tenant naming the same reply and id
		{"pa", "embed.results.pb.doc-1", "doc-1"},
		{"pa", "embed.results.pa.doc-1", "doc-2"},
		{"pa", "embed.results.pa.doc-1d", "oc-1"}, // the same concatenation
		{"pae", "mbed.results.pa.doc-1", "doc-1"},
		{"", "paembed.results.pa.doc-1", "doc-1"},
	} {
		if ResultMsgID(other[0], other[1], other[2]) == a {
			t.Errorf("ResultMsgID%q collides with ResultMsgID(pa, embed.results.pa.doc-1, doc-1)", other)
		}
	}
	if ResultMsgID("t", "r", "") != "" || JobMsgID("t", "r", "") != "" {
		t.Error("a job without an id has a msg id")
	}
	if j := JobMsgID("pa", "embed.results.pa.doc-1", "doc-1"); j == a || j == JobMsgID("pb", "embed.results.pa.doc-1", "doc-1") {
		t.Errorf("job identity %s shared with a result or another tenant", j)
	}
}

func TestApplyHeader(t *testing.T) {
	h := map[string][]string{"embed-reply": {"inbox.1"}, "Embed-Deadline": {"2030-01-01T00:00:00Z"}}
	j := NewJob("a", "x")
	j.ApplyHeader(h)
	if j.Reply != "inbox.1" || j.Deadline != "2030-01-01T00:00:00Z" {
		t.Errorf("ApplyHeader filled %q, %q", j.Reply, j.Deadline)
	}
	j = NewJob("a", "x")
	j.Reply, j.Deadline = "body.reply", "2031-01-01T00:00:00Z"
	j.ApplyHeader(h)
	if j.Reply != "body.reply" || j.Deadline != "2031-01-01T00:00:00Z" {
		t.Errorf("headers overrode the body: %q, %q", j.Reply, j.Deadline)
	}
	j = NewJob("a", "x")
	j.ApplyHeader(map[string][]string{"Embed-Deadline": {"never"}})
	if jobErr, _ := DefaultLimits().Validate(j); codeOf(jobErr) != CodeBadPayload {
		t.Errorf("malformed deadline header: Validate = %v, want bad_payload", jobErr)
	}
}
