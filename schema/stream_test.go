package schema

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// onlyReader hides bytes.Reader's Len, so the decoders take the path for
// streams of unknown length.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func TestDecodeFromStream(t *testing.T) {
	j := NewJob("stream", strings.Repeat("long text ", 1000), "short")
	data := mustEncodeJob(t, j, EncodingMsgpack)
	var got Job
	if err := msgpack.NewDecoder(onlyReader{bytes.NewReader(data)}).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if !sameJob(j, &got) {
		t.Errorf("stream decode changed the job")
	}

	res := benchResult()
	res.Items[0].Dense = make(Vector, 20000) // over one preallocation chunk
	for i := range res.Items[0].Dense {
		res.Items[0].Dense[i] = float32(i) - 0.5
	}
	data, err := EncodeResult(res, EncodingMsgpack)
	if err != nil {
		t.Fatal(err)
	}
	var gotRes Result
	if err := msgpack.NewDecoder(onlyReader{bytes.NewReader(data)}).Decode(&gotRes); err != nil {
		t.Fatal(err)
	}
	if !sameResult(res, &gotRes) {
		t.Errorf("stream decode changed the result")
	}
}

func TestDecodeFromStreamForgedLengths(t *testing.T) {
	for name, data := range map[string][]byte{
		"texts": mpMap(mpStr("texts"), array32Huge),
		"id":    mpMap(mpStr("id"), str32Huge),
	} {
		var j Job
		var err error
		n := allocBytes(func() { err = msgpack.NewDecoder(onlyReader{bytes.NewReader(data)}).Decode(&j) })
		if err == nil {
			t.Errorf("%s: forged length decoded", name)
		}
		if n > 256<<10 {
			t.Errorf("%s: allocated %d bytes for a %d-byte stream", name, n, len(data))
		}
	}
	var res Result
	data := mpMap(mpStr("items"), mpArr(mpMap(mpStr("dense"), bin32Huge)))
	n := allocBytes(func() { _ = msgpack.NewDecoder(onlyReader{bytes.NewReader(data)}).Decode(&res) })
	if n > 256<<10 {
		t.Errorf("forged vector: allocated %d bytes for a %d-byte stream", n, len(data))
	}
}
