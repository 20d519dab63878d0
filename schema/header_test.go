package schema

import (
	"reflect"
	"testing"
)

func TestJobHeader(t *testing.T) {
	j := NewJob("job-1", "x")
	got := JobHeader(j, EncodingJSON)
	want := map[string][]string{"Content-Type": {"application/json"}, "Nats-Msg-Id": {"job-1"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("JobHeader = %v, want %v", got, want)
	}
	j.Deadline = "2030-01-01T00:00:00Z"
	if got := JobHeader(j, EncodingMsgpack); got["Embed-Deadline"][0] != j.Deadline || got["Content-Type"][0] != "application/msgpack" {
		t.Errorf("JobHeader with deadline = %v", got)
	}
}

func TestResultHeader(t *testing.T) {
	got := ResultHeader(&Result{V: 1, ID: "j"}, EncodingMsgpack)
	if _, ok := got["Embed-Error-Code"]; ok || got["Nats-Msg-Id"][0] != "j" {
		t.Errorf("ResultHeader(success) = %v", got)
	}
	got = ResultHeader(ErrorResult("j", Errorf(CodeShapeNotWarmed, "later")), EncodingJSON)
	if got["Embed-Error-Code"][0] != "shape_not_warmed" || got["Content-Type"][0] != "application/json" {
		t.Errorf("ResultHeader(error) = %v", got)
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
