package schema

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"strings"
	"testing"
)

// mp builds msgpack by hand: fixstr, fixmap and fixarray helpers are
// enough to forge the payloads the encoder would never write.
func mpStr(s string) []byte { return append([]byte{0xa0 | byte(len(s))}, s...) }

func mpMap(kv ...[]byte) []byte {
	return append([]byte{0x80 | byte(len(kv)/2)}, bytes.Join(kv, nil)...)
}

func mpArr(el ...[]byte) []byte {
	return append([]byte{0x90 | byte(len(el))}, bytes.Join(el, nil)...)
}

func concat(b ...[]byte) []byte { return bytes.Join(b, nil) }

var (
	array32Huge = []byte{0xdd, 0x7f, 0xff, 0xff, 0xff} // claims 2^31-1 elements
	map32Huge   = []byte{0xdf, 0x7f, 0xff, 0xff, 0xff}
	str32Huge   = []byte{0xdb, 0xff, 0xff, 0xff, 0xfe}
	bin32Huge   = []byte{0xc6, 0xff, 0xff, 0xff, 0xfc}
	goodTexts   = mpArr(mpStr("hello"))
)

func TestDecodeJobMsgpack(t *testing.T) {
	deep := concat(bytes.Repeat([]byte{0x91}, 100), []byte{0xc0})
	tests := []struct {
		name string
		data []byte
		want Code // "" = decodes without error
	}{
		{"minimal", mpMap(mpStr("id"), mpStr("a"), mpStr("texts"), goodTexts), ""},
		{"nil fields are absent", mpMap(mpStr("id"), mpStr("a"), mpStr("texts"), goodTexts, mpStr("v"), []byte{0xc0},
			mpStr("truncate"), []byte{0xc0}, mpStr("meta"), []byte{0xc0}), ""},
		{"unknown fields skipped", mpMap(mpStr("id"), mpStr("a"), mpStr("texts"), goodTexts,
			mpStr("future"), mpMap(mpStr("x"), mpArr([]byte{0x01}, []byte{0xcb, 0, 0, 0, 0, 0, 0, 0, 0}))), ""},
		{"bin text accepted", mpMap(mpStr("id"), mpStr("a"), mpStr("texts"), mpArr([]byte{0xc4, 1, 'x'})), ""},
		{"uint8 version", mpMap(mpStr("v"), []byte{0xcc, 1}, mpStr("id"), mpStr("a"), mpStr("texts"), goodTexts), ""},
		{"empty", nil, CodeBadPayload},
		{"nil", []byte{0xc0}, CodeBadPayload},
		{"array", mpArr(mpStr("id")), CodeBadPayload},
		{"string", mpStr("job"), CodeBadPayload},
		{"truncated map", []byte{0x82, 0xa2, 'i', 'd'}, CodeBadPayload},
		{"truncated string", []byte{0x81, 0xa2, 'i', 'd', 0xa5, 'a'}, CodeBadPayload},
		{"trailing bytes", concat(mpMap(mpStr("id"), mpStr("a")), []byte{0x00}), CodeBadPayload},
		{"int key", mpMap([]byte{0x01}, mpStr("a")), CodeBadPayload},
		{"id int", mpMap(mpStr("id"), []byte{0x05}), CodeBadPayload},
		{"texts string", mpMap(mpStr("texts"), mpStr("hello")), CodeBadPayload},
		{"texts of ints", mpMap(mpStr("texts"), mpArr([]byte{0x01})), CodeBadPayload},
		{"texts of maps", mpMap(mpStr("texts"), mpArr(mpMap())), CodeBadPayload},
		{"outputs string", mpMap(mpStr("outputs"), mpStr("dense")), CodeBadPayload},
		{"truncate int", mpMap(mpStr("truncate"), []byte{0x01}), CodeBadPayload},
		{"v float", mpMap(mpStr("v"), []byte{0xca, 0x3f, 0x80, 0, 0}), CodeBadPayload},
		{"v string", mpMap(mpStr("v"), mpStr("1")), CodeBadPayload},
		{"v uint64 overflow", mpMap(mpStr("v"), []byte{0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}), CodeBadPayload},
		{"meta array", mpMap(mpStr("meta"), mpArr()), CodeBadPayload},
		{"meta int key", mpMap(mpStr("meta"), mpMap([]byte{0x01}, []byte{0x02})), CodeBadPayload},
		{"meta ext", mpMap(mpStr("meta"), mpMap(mpStr("t"), []byte{0xd4, 0x01, 0x00})), CodeBadPayload},
		{"meta timestamp", mpMap(mpStr("meta"), mpMap(mpStr("t"), []byte{0xd6, 0xff, 0, 0, 0, 1})), CodeBadPayload},
		{"meta too deep", mpMap(mpStr("meta"), mpMap(mpStr("d"), deep)), CodeBadPayload},
		{"unknown too deep", mpMap(mpStr("x"), deep), CodeBadPayload},
		{"huge texts array", mpMap(mpStr("texts"), array32Huge), CodeBadPayload},
		{"huge outputs array", mpMap(mpStr("outputs"), array32Huge), CodeBadPayload},
		{"huge map", map32Huge, CodeBadPayload},
		{"huge meta map", mpMap(mpStr("meta"), map32Huge), CodeBadPayload},
		{"huge meta array", mpMap(mpStr("meta"), mpMap(mpStr("a"), array32Huge)), CodeBadPayload},
		{"huge id", mpMap(mpStr("id"), str32Huge), CodeBadPayload},
		{"huge unknown bin", mpMap(mpStr("x"), bin32Huge), CodeBadPayload},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, err := DecodeJob(tt.data, EncodingMsgpack)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("DecodeJob: %v", err)
				}
				if j.ID != "a" || len(j.Texts) != 1 || j.V != 1 {
					t.Errorf("decoded %+v", j)
				}
				return
			}
			se, _ := err.(*Error)
			if codeOf(se) != tt.want {
				t.Fatalf("DecodeJob error = %v, want %s", err, tt.want)
			}
		})
	}
}

func TestDecodeJobJSON(t *testing.T) {
	tests := []struct {
		name  string
		data  string
		want  Code // from DecodeJob
		wantV int
	}{
		{"minimal", `{"id":"a","texts":["x"]}`, "", 1},
		{"explicit v", `{"v":1,"id":"a","texts":["x"]}`, "", 1},
		{"v null is absent", `{"v":null,"id":"a","texts":["x"]}`, "", 1},
		{"v zero kept", `{"v":0,"id":"a","texts":["x"]}`, "", 0},
		{"v two kept", `{"v":2,"id":"a","texts":["x"]}`, "", 2},
		{"leading space", " \n{\"id\":\"a\",\"texts\":[\"x\"]}", "", 1},
		{"unknown field", `{"id":"a","texts":["x"],"later":{"deep":[1,2]}}`, "", 1},
		{"empty", ``, CodeBadPayload, 0},
		{"null", `null`, CodeBadPayload, 0},
		{"array", `[{"id":"a"}]`, CodeBadPayload, 0},
		{"string", `"job"`, CodeBadPayload, 0},
		{"truncated", `{"id":"a","texts":["x"`, CodeBadPayload, 0},
		{"trailing object", `{"id":"a","texts":["x"]}{}`, CodeBadPayload, 0},
		{"trailing garbage", `{"id":"a","texts":["x"]} x`, CodeBadPayload, 0},
		{"id number", `{"id":5,"texts":["x"]}`, CodeBadPayload, 0},
		{"texts string", `{"id":"a","texts":"x"}`, CodeBadPayload, 0},
		{"texts numbers", `{"id":"a","texts":[1]}`, CodeBadPayload, 0},
		{"v float", `{"v":1.5,"id":"a","texts":["x"]}`, CodeBadPayload, 0},
		{"truncate string", `{"id":"a","texts":["x"],"truncate":"no"}`, CodeBadPayload, 0},
		{"meta array", `{"id":"a","texts":["x"],"meta":[1]}`, CodeBadPayload, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, err := DecodeJob([]byte(tt.data), EncodingJSON)
			se, _ := err.(*Error)
			if codeOf(se) != tt.want || (err != nil) != (tt.want != "") {
				t.Fatalf("DecodeJob error = %v, want %q", err, tt.want)
			}
			if tt.want == "" && (j.V != tt.wantV || j.ID != "a") {
				t.Errorf("decoded %+v, want v=%d id=a", j, tt.wantV)
			}
		})
	}
}

func TestDecodeJobKeepsPartialJob(t *testing.T) {
	data := mpMap(mpStr("id"), mpStr("job-7"), mpStr("reply"), mpStr("r.7"), mpStr("texts"), mpStr("oops"))
	j, err := DecodeJob(data, EncodingMsgpack)
	if err == nil {
		t.Fatal("decoded a job whose texts is a string")
	}
	if j == nil || j.ID != "job-7" || j.Reply != "r.7" {
		t.Errorf("partial job = %+v, want id and reply", j)
	}
}

func TestDecodeResultMsgpackRejects(t *testing.T) {
	vec := func(b ...byte) []byte { return append([]byte{0xc4, byte(len(b))}, b...) }
	item := func(kv ...[]byte) []byte { return mpMap(mpStr("id"), mpStr("r"), mpStr("items"), mpArr(mpMap(kv...))) }
	tests := []struct {
		name string
		data []byte
	}{
		{"not a map", mpArr()},
		{"dense not multiple of 4", item(mpStr("dense"), vec(1, 2, 3))},
		{"dense array of floats", item(mpStr("dense"), mpArr([]byte{0xca, 0, 0, 0, 0}))},
		{"dense huge bin", item(mpStr("dense"), bin32Huge)},
		{"dense truncated", item(mpStr("dense"), []byte{0xc4, 8, 0, 0, 0, 0})},
		{"colbert huge", item(mpStr("colbert"), array32Huge)},
		{"colbert of strings", item(mpStr("colbert"), mpArr(mpStr("x")))},
		{"items huge", mpMap(mpStr("items"), array32Huge)},
		{"sparse id negative", item(mpStr("sparse"), mpMap(mpStr("ids"), mpArr([]byte{0xff})))},
		{"sparse id too big", item(mpStr("sparse"), mpMap(mpStr("ids"), mpArr([]byte{0xcf, 0, 0, 0, 1, 0, 0, 0, 0})))},
		{"sparse ids huge", item(mpStr("sparse"), mpMap(mpStr("ids"), array32Huge))},
		{"error without code", mpMap(mpStr("error"), mpMap(mpStr("message"), mpStr("m")))},
		{"error not map", mpMap(mpStr("error"), mpStr("internal"))},
		{"usage string", mpMap(mpStr("usage"), mpStr("x"))},
		{"tokens bool", item(mpStr("tokens"), []byte{0xc3})},
	}
	for _, tt := range tests {
		if _, err := DecodeResult(tt.data, EncodingMsgpack); codeOf(asError(err)) != CodeBadPayload {
			t.Errorf("%s: DecodeResult error = %v, want bad_payload", tt.name, err)
		}
	}
	ok := item(mpStr("dense"), vec(0, 0, 0x80, 0x3f), mpStr("tokens"), []byte{0x03})
	res, err := DecodeResult(ok, EncodingMsgpack)
	if err != nil || len(res.Items) != 1 || res.Items[0].Dense[0] != 1 || res.Items[0].Tokens != 3 {
		t.Errorf("DecodeResult(hand-made) = %+v, %v", res, err)
	}
}

func asError(err error) *Error {
	se, _ := err.(*Error)
	return se
}

// TestDecodeAllocationBounded decodes payloads whose headers claim 2^31
// elements or 4 GiB: the allocation must stay near the payload size.
func TestDecodeAllocationBounded(t *testing.T) {
	payloads := map[string][]byte{
		"texts":   concat(mpMap(mpStr("id"), mpStr("a"), mpStr("texts"), array32Huge), []byte(strings.Repeat("\xa1x", 100))),
		"meta":    mpMap(mpStr("meta"), mpMap(mpStr("a"), map32Huge)),
		"id":      mpMap(mpStr("id"), str32Huge),
		"outputs": mpMap(mpStr("outputs"), array32Huge),
	}
	for name, data := range payloads {
		got := allocBytes(func() { _, _ = DecodeJob(data, EncodingMsgpack) })
		if got > 64<<10 {
			t.Errorf("%s: decoding a %d-byte job allocated %d bytes", name, len(data), got)
		}
	}
	dense := binary.BigEndian.AppendUint32([]byte{0xc6}, 1<<31)
	res := mpMap(mpStr("items"), mpArr(mpMap(mpStr("dense"), dense)))
	if got := allocBytes(func() { _, _ = DecodeResult(res, EncodingMsgpack) }); got > 64<<10 {
		t.Errorf("result with a forged 2 GiB vector: allocated %d bytes", got)
	}
}

func allocBytes(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
