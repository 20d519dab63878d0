package schema

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// checkJobRoundTrip is the fuzz property shared by both decoders: decoding
// never panics, fails only with bad_payload, and a job that decodes and
// validates re-encodes to bytes that decode to an equal, still valid job
// and encode to the same bytes again.
func checkJobRoundTrip(t *testing.T, data []byte, enc Encoding) {
	j, err := DecodeJob(data, enc)
	if err != nil {
		if codeOf(asError(err)) != CodeBadPayload {
			t.Fatalf("decode error %v is not bad_payload", err)
		}
		return
	}
	if jobErr, _ := DefaultLimits().Validate(j); jobErr != nil {
		return
	}
	checkMetaEcho(t, j, enc)
	b1, err := EncodeJob(j, enc)
	if err != nil {
		t.Fatalf("valid job %#v does not encode: %v", j, err)
	}
	j2, err := DecodeJob(b1, enc)
	if err != nil {
		t.Fatalf("re-encoded job does not decode: %v\n%q", err, b1)
	}
	if !sameJob(j, j2) {
		t.Fatalf("round trip changed the job:\n got %#v\nwant %#v", j2, j)
	}
	if jobErr, _ := DefaultLimits().Validate(j2); jobErr != nil {
		t.Fatalf("re-decoded job is invalid: %v", jobErr)
	}
	b2, err := EncodeJob(j2, enc)
	if err != nil || !bytes.Equal(b1, b2) {
		t.Fatalf("encoding is not stable: %v\n%q\n%q", err, b1, b2)
	}
}

// checkMetaEcho: the result of a job that decoded carries its meta's bytes
// unchanged, and decodes (with DecodeResult, and with the plain decoders a
// client may use instead).
func checkMetaEcho(t *testing.T, j *Job, enc Encoding) {
	res := &Result{V: Version, ID: j.ID}
	res.EchoMeta(j)
	data, err := EncodeResult(res, enc)
	if err != nil {
		t.Fatalf("result echoing meta does not encode: %v", err)
	}
	if raw := j.rawMeta.in(enc); raw != nil && !bytes.Contains(data, raw) {
		t.Fatalf("meta not echoed byte for byte:\n%q\n%q", raw, data)
	}
	if _, err := DecodeResult(data, enc); err != nil {
		t.Fatalf("result echoing meta does not decode: %v\n%q", err, data)
	}
	var plain map[string]any
	if enc == EncodingJSON {
		err = json.Unmarshal(data, &plain)
	} else {
		err = msgpack.Unmarshal(data, &plain)
	}
	if err != nil {
		t.Fatalf("a plain decoder cannot decode the result: %v\n%q", err, data)
	}
}

func FuzzDecodeJobMsgpack(f *testing.F) {
	for _, j := range []*Job{NewJob("a", "x"), fullJob(EncodingMsgpack)} {
		f.Add(mustEncodeJob(f, j, EncodingMsgpack))
	}
	f.Add(mpMap(mpStr("id"), mpStr("a"), mpStr("texts"), array32Huge))
	f.Add(mpMap(mpStr("meta"), mpMap(mpStr("a"), map32Huge)))
	f.Add(mpMap(mpStr("id"), mpStr("a"), mpStr("texts"), goodTexts, mpStr("id"), mpStr("b")))
	f.Add(mpMap(mpStr("id"), mpStr("a"), mpStr("texts"), goodTexts, mpStr("meta"),
		mpMap(mpStr("z"), []byte{0xcd, 0, 5}, mpStr("a"), mpMap(mpStr("k"), []byte{1}, mpStr("k"), []byte{2}))))
	f.Add(mpMap(mpStr("id"), mpStr("a"), mpStr("texts"), goodTexts, mpStr("REPLY"), mpStr("x.y"), mpStr("meta"), mpMap(mpStr("z"), []byte{0xcb, 0x7f, 0xf0, 0, 0, 0, 0, 0, 0})))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkJobRoundTrip(t, data, EncodingMsgpack)
	})
}

func FuzzDecodeJobJSON(f *testing.F) {
	for _, j := range []*Job{NewJob("a", "x"), fullJob(EncodingJSON)} {
		f.Add(mustEncodeJob(f, j, EncodingJSON))
	}
	f.Add([]byte(`{"v":0,"id":"a","texts":["x"]}`))
	f.Add([]byte(`{"ID":"a","Texts":["\ud800"],"meta":{"n":1e400}}`))
	f.Add([]byte(`{"id":"a","texts":["x"],"meta":{"n":1e999}}`))
	f.Add([]byte(`{"id":"a","texts":["x"],"id":"b"}`))
	f.Add([]byte(`{"id":"a","texts":["x"],"\u0069d":"b","REPLY":"$KV.x"}`))
	f.Add([]byte(`{"id":"a","texts":["x"],"meta":{ "z": 1.50, "a" : [1e2, "\u00e9", {"k":1,"k":2}] }}`))
	f.Add([]byte(`{"id":"a","texts":["x"],"meta":{"d":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkJobRoundTrip(t, data, EncodingJSON)
	})
}

// FuzzDecodeResultMsgpack checks what a client runs on replies: decoding
// never panics, and a decoded result re-encodes to an equal one.
func FuzzDecodeResultMsgpack(f *testing.F) {
	data, err := EncodeResult(fullResult(specialFloats), EncodingMsgpack)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add(mpMap(mpStr("items"), mpArr(mpMap(mpStr("colbert"), array32Huge))))
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := DecodeResult(data, EncodingMsgpack)
		if err != nil {
			return
		}
		b, err := EncodeResult(res, EncodingMsgpack)
		if err != nil {
			t.Fatalf("decoded result does not encode: %v", err)
		}
		res2, err := DecodeResult(b, EncodingMsgpack)
		if err != nil {
			t.Fatalf("re-encoded result does not decode: %v", err)
		}
		if !sameResult(res, res2) {
			t.Fatalf("round trip changed the result:\n got %#v\nwant %#v", res2, res)
		}
	})
}
