package schema

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// TestDecodeJobStrictJSON: field names match exactly, a key given twice
// anywhere is bad_payload, numbers stay within float64, nesting is bounded.
func TestDecodeJobStrictJSON(t *testing.T) {
	deep := strings.Repeat(`{"a":`, 70) + "1" + strings.Repeat("}", 70)
	for _, c := range []struct {
		name, data string
		bad        bool
	}{
		{"exact names", `{"id":"a","texts":["x"],"reply":"embed.results.a"}`, false},
		{"upper-case field is unknown", `{"id":"a","texts":["x"],"REPLY":"$KV.X.y"}`, false},
		{"duplicate id", `{"id":"a","texts":["x"],"id":"b"}`, true},
		{"duplicate through an escape", `{"id":"a","texts":["x"],"\u0069d":"b"}`, true},
		{"duplicate null", `{"id":"a","texts":["x"],"reply":null,"reply":"r.x"}`, true},
		{"duplicate in meta", `{"id":"a","texts":["x"],"meta":{"k":1,"k":2}}`, true},
		{"duplicate deep in meta", `{"id":"a","texts":["x"],"meta":{"k":[{"a":1,"a":1}]}}`, true},
		{"duplicate in an unknown field", `{"id":"a","texts":["x"],"later":{"x":1,"x":2}}`, true},
		{"same key in two objects", `{"id":"a","texts":["x"],"meta":{"a":{"k":1},"b":{"k":1}}}`, false},
		{"1e999 in meta", `{"id":"a","texts":["x"],"meta":{"n":1e999}}`, true},
		{"-1e999 in meta", `{"id":"a","texts":["x"],"meta":{"n":[-1e999]}}`, true},
		{"1e308 in meta", `{"id":"a","texts":["x"],"meta":{"n":1e308}}`, false},
		{"long integer in meta", `{"id":"a","texts":["x"],"meta":{"n":123456789012345678901234567890}}`, false},
		{"deep meta", `{"id":"a","texts":["x"],"meta":` + deep + `}`, true},
		{"deep unknown field", `{"id":"a","texts":["x"],"later":` + deep + `}`, true},
		{"meta string", `{"id":"a","texts":["x"],"meta":"m"}`, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			j, err := DecodeJob([]byte(c.data), EncodingJSON)
			if (err != nil) != c.bad {
				t.Fatalf("DecodeJob = %v, want bad_payload %v", err, c.bad)
			}
			if err != nil {
				if codeOf(asError(err)) != CodeBadPayload {
					t.Errorf("error %v is not bad_payload", err)
				}
				return
			}
			if strings.Contains(c.data, "REPLY") && j.Reply != "" {
				t.Errorf("\"REPLY\" was taken as reply: %q", j.Reply)
			}
		})
	}
}

// TestDecodeJobStrictMsgpack: a key given twice at any level is bad_payload.
func TestDecodeJobStrictMsgpack(t *testing.T) {
	job := func(kv ...[]byte) []byte {
		all := [][]byte{mpStr("id"), mpStr("a"), mpStr("texts"), goodTexts}
		return mpMap(append(all, kv...)...)
	}
	for _, c := range []struct {
		name string
		data []byte
		bad  bool
	}{
		{"plain", job(), false},
		{"upper-case field is unknown", job(mpStr("REPLY"), mpStr("x.y")), false},
		{"duplicate id", job(mpStr("id"), mpStr("b")), true},
		{"duplicate nil", job(mpStr("reply"), []byte{0xc0}, mpStr("reply"), mpStr("r.x")), true},
		{"duplicate in meta", job(mpStr("meta"), mpMap(mpStr("k"), []byte{1}, mpStr("k"), []byte{2})), true},
		{"duplicate deep in meta", job(mpStr("meta"), mpMap(mpStr("k"), mpArr(mpMap(mpStr("a"), []byte{1}, mpStr("a"), []byte{1})))), true},
		{"duplicate in an unknown field", job(mpStr("later"), mpMap(mpStr("x"), []byte{1}, mpStr("x"), []byte{2})), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeJob(c.data, EncodingMsgpack)
			if (err != nil) != c.bad || (err != nil && codeOf(asError(err)) != CodeBadPayload) {
				t.Fatalf("DecodeJob = %v, want bad_payload %v", err, c.bad)
			}
		})
	}
	res := mpMap(mpStr("v"), []byte{1}, mpStr("id"), mpStr("a"), mpStr("id"), mpStr("b"))
	if _, err := DecodeResult(res, EncodingMsgpack); err == nil {
		t.Error("DecodeResult took a result with its id given twice")
	}
}

// echoResult decodes a job body and encodes the result that echoes its
// meta, in encoding out.
func echoResult(t *testing.T, body []byte, in, out Encoding) []byte {
	t.Helper()
	j, err := DecodeJob(body, in)
	if err != nil {
		t.Fatal(err)
	}
	res := &Result{V: Version, ID: j.ID}
	res.EchoMeta(j)
	data, err := EncodeResult(res, out)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestMetaEchoedByteForByte: the result carries meta exactly as the job
// did, in both encodings, and the result still decodes in Go.
func TestMetaEchoedByteForByte(t *testing.T) {
	t.Run("json", func(t *testing.T) {
		meta := `{ "z": 1.50, "a" : [1e2, "\u00e9", -0, 123456789012345678901234567890], "n": null, "o": {} }`
		data := echoResult(t, []byte(`{"id":"a","texts":["x"],"meta":`+meta+`}`), EncodingJSON, EncodingJSON)
		if !bytes.Contains(data, []byte(`"meta":`+meta+`}`)) {
			t.Errorf("meta not echoed byte for byte:\n%s", data)
		}
		var plain map[string]any
		if err := json.Unmarshal(data, &plain); err != nil {
			t.Errorf("encoding/json cannot decode the result: %v\n%s", err, data)
		}
		back, err := DecodeResult(data, EncodingJSON)
		if err != nil || back.Meta["z"] != json.Number("1.50") {
			t.Errorf("DecodeResult = %v, meta %v", err, back.Meta)
		}
	})
	t.Run("msgpack", func(t *testing.T) {
		// Unsorted keys and an integer in a wider form than needed: a
		// re-encoding would sort them and shrink it.
		meta := mpMap(mpStr("z"), []byte{0xcd, 0x00, 0x05}, mpStr("a"), mpArr([]byte{0xca, 0x3f, 0xc0, 0x00, 0x00}))
		out := echoResult(t, mpMap(mpStr("id"), mpStr("a"), mpStr("texts"), goodTexts, mpStr("meta"), meta), EncodingMsgpack, EncodingMsgpack)
		if !bytes.Contains(out, append(mpStr("meta"), meta...)) {
			t.Errorf("meta not echoed byte for byte: % x", out)
		}
		back, err := DecodeResult(out, EncodingMsgpack)
		if err != nil || back.Meta["z"] != int64(5) {
			t.Errorf("DecodeResult = %v, meta %v", err, back.Meta)
		}
		var plain map[string]any
		if err := msgpack.Unmarshal(out, &plain); err != nil {
			t.Errorf("msgpack cannot decode the result: %v", err)
		}
	})
	t.Run("other encoding or a Go job", func(t *testing.T) {
		out := echoResult(t, []byte(`{"id":"a","texts":["x"],"meta":{"k":"v"}}`), EncodingJSON, EncodingMsgpack)
		if back, err := DecodeResult(out, EncodingMsgpack); err != nil || back.Meta["k"] != "v" {
			t.Errorf("meta across encodings: %v %v", err, back)
		}
		g := NewJob("g", "x")
		g.Meta = map[string]any{"k": 1}
		res := &Result{V: Version, ID: "g"}
		res.EchoMeta(g)
		out, err := EncodeResult(res, EncodingJSON)
		if err != nil || !bytes.Contains(out, []byte(`"meta":{"k":1}`)) {
			t.Errorf("meta of a Go job: %v %s", err, out)
		}
	})
}
