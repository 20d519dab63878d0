package schema

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"
)

func TestEncodingFor(t *testing.T) {
	tests := []struct {
		ct   string
		want Encoding
	}{
		{"", EncodingMsgpack},
		{"application/json", EncodingJSON},
		{"Application/JSON", EncodingJSON},
		{"application/json; charset=utf-8", EncodingJSON},
		{" application/json ;charset=UTF-8", EncodingJSON},
		{"application/json; charset", EncodingJSON}, // malformed parameter
		{"application/msgpack", EncodingMsgpack},
		{"application/x-msgpack", EncodingMsgpack},
		{"text/plain", EncodingMsgpack},
		{"application/jsonx", EncodingMsgpack},
		{"application/json-seq", EncodingMsgpack},
		{"json", EncodingMsgpack},
	}
	for _, tt := range tests {
		if got := EncodingFor(tt.ct); got != tt.want {
			t.Errorf("EncodingFor(%q) = %s, want %s", tt.ct, got, tt.want)
		}
	}
}

func TestContentTypeRoundTrip(t *testing.T) {
	for _, e := range []Encoding{EncodingMsgpack, EncodingJSON} {
		if got := EncodingFor(e.ContentType()); got != e {
			t.Errorf("EncodingFor(%s.ContentType()) = %s", e, got)
		}
	}
	if EncodingJSON.ContentType() != "application/json" {
		t.Errorf("JSON content type = %q", EncodingJSON.ContentType())
	}
}

// specialFloats are values whose bits a lossy codec would change.
var specialFloats = []float32{
	0, float32(math.Copysign(0, -1)), 1, -1, math.MaxFloat32, -math.MaxFloat32,
	math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, 1e-40, // denormals
	float32(math.Inf(1)), float32(math.Inf(-1)),
	math.Float32frombits(0x7fc00001), math.Float32frombits(0xffa00000), // quiet NaN with payload, signalling NaN
	0.1, 1.0 / 3,
}

func TestVectorMsgpackIsLittleEndianBin(t *testing.T) {
	for _, n := range []int{1, 63, 64, 255, 1024, 16384, 16385} {
		v := make(Vector, n)
		for i := range v {
			v[i] = specialFloats[i%len(specialFloats)]
		}
		res := &Result{V: 1, ID: "x", Items: []Item{{Dense: v}}}
		data, err := EncodeResult(res, EncodingMsgpack)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, 4*n)
		for i, f := range v {
			binary.LittleEndian.PutUint32(want[4*i:], math.Float32bits(f))
		}
		var hdr []byte
		switch {
		case 4*n < 1<<8:
			hdr = []byte{0xc4, byte(4 * n)}
		case 4*n < 1<<16:
			hdr = binary.BigEndian.AppendUint16([]byte{0xc5}, uint16(4*n))
		default:
			hdr = binary.BigEndian.AppendUint32([]byte{0xc6}, uint32(4*n))
		}
		key := append([]byte{0xa5}, "dense"...)
		i := bytes.Index(data, key)
		if i < 0 {
			t.Fatalf("n=%d: no dense key in %x", n, data)
		}
		body := data[i+len(key):]
		if !bytes.HasPrefix(body, append(hdr, want...)) {
			t.Fatalf("n=%d: dense is not bin header %x + %d LE bytes: got %x...", n, hdr, 4*n, body[:min(len(body), 16)])
		}
		got, err := DecodeResult(data, EncodingMsgpack)
		if err != nil {
			t.Fatal(err)
		}
		if !sameVector(got.Items[0].Dense, v) {
			t.Errorf("n=%d: dense did not round-trip bit-exactly", n)
		}
	}
}

func TestVectorNilAndEmpty(t *testing.T) {
	res := &Result{V: 1, ID: "x", Items: []Item{{Sparse: &Sparse{IDs: []uint32{}, Weights: Vector{}}}, {Sparse: &Sparse{}}}}
	data, err := EncodeResult(res, EncodingMsgpack)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeResult(data, EncodingMsgpack)
	if err != nil {
		t.Fatal(err)
	}
	if w := got.Items[0].Sparse.Weights; w == nil || len(w) != 0 {
		t.Errorf("empty weights decoded as %#v, want empty non-nil", w)
	}
	if w := got.Items[1].Sparse.Weights; w != nil {
		t.Errorf("nil weights decoded as %#v, want nil", w)
	}
}

func TestEncodeResultJSONRefusesNaN(t *testing.T) {
	res := &Result{V: 1, ID: "x", Items: []Item{{Dense: Vector{float32(math.NaN())}}}}
	if _, err := EncodeResult(res, EncodingJSON); err == nil {
		t.Error("JSON encoding of NaN succeeded; JSON has no NaN")
	}
}

// TestEmptyVectorsDecodeAsNone: an empty dense or ColBERT is not encoded,
// so it decodes as none in both encodings, and a round trip keeps the
// result as it is (CI's fuzzing found the msgpack case).
func TestEmptyVectorsDecodeAsNone(t *testing.T) {
	for enc, data := range map[Encoding][]byte{
		EncodingJSON:    []byte(`{"v":1,"id":"x","items":[{"dense":[],"colbert":[]}]}`),
		EncodingMsgpack: []byte("\x81\xa5items\x91\x82\xa5dense\xc4\x00\xa7colbert\x90"),
	} {
		res, err := DecodeResult(data, enc)
		if err != nil {
			t.Fatalf("%s: %v", enc, err)
		}
		if it := res.Items[0]; it.Dense != nil || it.ColBERT != nil {
			t.Errorf("%s: dense %#v, colbert %#v; want none", enc, it.Dense, it.ColBERT)
		}
	}
}
