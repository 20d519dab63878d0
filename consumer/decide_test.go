package consumer

import (
	"errors"
	"testing"
	"time"

	"github.com/jetembed/jetembed/schema"
)

// TestDecide is the outcome table: error x delivery count x request-reply
// -> verdict, NAK delay, DLQ copy and the result sent (its error code). It
// calls decide on a Consumer that never starts, without the async rig:
// decide depends only on the job, the error and the delivery limits.
func TestDecide(t *testing.T) {
	c, err := New(Config{Delivery: DeliveryLimits{MaxDeliver: 3}, NakBackoff: Backoff{Base: time.Second, Max: 4 * time.Second, Jitter: -1}}, shortEmb{}, nopPub{})
	if err != nil {
		t.Fatal(err)
	}
	ok := &schema.Result{V: schema.Version, ID: "j"}
	var (
		unavailable = schema.Errorf(schema.CodeEngineUnavailable, "busy")
		notWarmed   = schema.Errorf(schema.CodeShapeNotWarmed, "cold")
		badPayload  = schema.Errorf(schema.CodeBadPayload, "bad")
		tooLong     = schema.Errorf(schema.CodeTextTooLong, "long")
		badReply    = schema.Errorf(schema.CodeBadReply, "refused")
		deadline    = schema.Errorf(schema.CodeDeadlineExceeded, "late")
		bug         = errors.New("index out of range")
	)
	type want struct {
		verdict verdict
		delay   time.Duration
		dlq     bool
		result  bool        // a result is sent
		code    schema.Code // its error code ("" for success)
	}
	for _, tt := range []struct {
		name      string
		err       error
		delivered uint64
		rr        bool // request-reply
		want      want
	}{
		{"success", nil, 1, false, want{verdictAck, 0, false, true, ""}},
		{"success rr", nil, 1, true, want{verdictAck, 0, false, true, ""}},
		{"retriable first", unavailable, 1, false, want{verdictNak, time.Second, false, false, ""}},
		{"retriable second", unavailable, 2, false, want{verdictNak, 2 * time.Second, false, false, ""}},
		{"retriable final", unavailable, 3, false, want{verdictTerm, 0, true, true, schema.CodeEngineUnavailable}},
		{"retriable past final", notWarmed, 7, false, want{verdictTerm, 0, true, true, schema.CodeShapeNotWarmed}},
		{"retriable rr", unavailable, 1, true, want{verdictAck, 0, false, true, schema.CodeEngineUnavailable}},
		{"internal first", bug, 1, false, want{verdictNak, time.Second, false, false, ""}},
		{"internal final", bug, 3, false, want{verdictTerm, 0, true, true, schema.CodeInternal}},
		{"internal rr", bug, 1, true, want{verdictAck, 0, false, true, schema.CodeInternal}},
		{"bad input", badPayload, 1, false, want{verdictTerm, 0, true, true, schema.CodeBadPayload}},
		{"bad input rr", tooLong, 1, true, want{verdictTerm, 0, true, true, schema.CodeTextTooLong}},
		{"bad reply", badReply, 1, false, want{verdictTerm, 0, true, false, ""}},
		{"deadline", deadline, 2, false, want{verdictAck, 0, false, true, schema.CodeDeadlineExceeded}},
		{"shutdown", errShutdown, 1, false, want{verdictNak, 0, false, false, ""}},
		{"shutdown rr", errShutdown, 1, true, want{verdictAck, 0, false, true, schema.CodeEngineUnavailable}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			j := &job{id: "j", d: Delivery{NumDelivered: tt.delivered}}
			if tt.rr {
				j.d.Respond = func(map[string][]string, []byte) error { return nil }
			}
			var res *schema.Result
			if tt.err == nil {
				res = ok
			}
			out := c.decide(j, res, tt.err)
			got := want{verdict: out.verdict, delay: out.delay, dlq: out.dlq, result: out.result != nil}
			if out.result != nil && out.result.Error != nil {
				got.code = out.result.Error.Code
			}
			if got != tt.want {
				t.Errorf("decide = %+v, want %+v", got, tt.want)
			}
		})
	}
}
