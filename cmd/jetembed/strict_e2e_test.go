package main

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/jetembed/jetembed/schema"
)

// TestServeStrictJSON: through a real serve, JSON field names match
// exactly, a duplicate key is bad_payload, meta comes back byte for byte,
// and a meta number no float64 holds never makes a result Go cannot decode
// (issue 11, point 9).
func TestServeStrictJSON(t *testing.T) {
	r := newReplyRig(t)
	sub, err := r.nc.SubscribeSync("embed.results.strict.>")
	if err != nil {
		t.Fatal(err)
	}
	next := func(id string) (string, []byte, *schema.Result) {
		t.Helper()
		m, err := sub.NextMsg(20 * time.Second)
		if err != nil {
			t.Fatalf("job %s: no result: %v", id, err)
		}
		var plain map[string]any
		if err := json.Unmarshal(m.Data, &plain); err != nil {
			t.Errorf("job %s: encoding/json cannot decode the result: %v\n%s", id, err, m.Data)
		}
		return m.Subject, m.Data, decodeMsg(t, m)
	}

	r.publishAs("strict", nil, `{"id":"case","texts":["x"],"reply":"embed.results.strict.case","REPLY":"embed.results.strict.other"}`)
	if subj, _, res := next("case"); subj != "embed.results.strict.case" || res.Err() != nil {
		t.Errorf("\"REPLY\" was honoured: result on %s (%v)", subj, res.Err())
	}

	r.publishAs("strict", nil, `{"id":"dup","texts":["x"],"reply":"embed.results.strict.dup","texts":["y","z"]}`)
	if _, _, res := next("dup"); res.Error == nil || res.Error.Code != schema.CodeBadPayload {
		t.Errorf("duplicate key: result %+v, want bad_payload", res)
	}
	r.deadLetterCode("dup", schema.CodeBadPayload)

	r.publishAs("strict", nil, `{"id":"big","texts":["x"],"reply":"embed.results.strict.big","meta":{"n":1e999}}`)
	if _, _, res := next("big"); res.Error == nil || res.Error.Code != schema.CodeBadPayload {
		t.Errorf("meta 1e999: result %+v, want bad_payload", res)
	}
	r.deadLetterCode("big", schema.CodeBadPayload)

	meta := `{ "z": 1.50, "a" : [1e2, "\u00e9"], "n": null }`
	r.publishAs("strict", nil, `{"id":"raw","texts":["x"],"reply":"embed.results.strict.raw","meta":`+meta+`}`)
	if _, data, res := next("raw"); res.Err() != nil || !bytes.Contains(data, []byte(`"meta":`+meta)) {
		t.Errorf("meta not echoed byte for byte (%v):\n%s", res.Err(), data)
	}
}
