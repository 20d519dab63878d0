package schema

import (
	"math"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestHybridScore(t *testing.T) {
	q := &Item{Dense: Vector{0.6, 0.8}, Sparse: &Sparse{IDs: []uint32{3, 7, 9}, Weights: Vector{0.5, 0.25, 1}},
		ColBERT: []Vector{{1, 0}, {0, 1}}}
	d := &Item{Dense: Vector{0.8, 0.6}, Sparse: &Sparse{IDs: []uint32{1, 7, 9, 12}, Weights: Vector{2, 0.5, 0.1, 3}},
		ColBERT: []Vector{{0.6, 0.8}, {1, 0}, {0, -1}}}
	s := HybridScore(q, d, DefaultRerankWeights)
	// dense 0.48+0.48; sparse 0.25*0.5 + 1*0.1; colbert mean(max(0.6,1,0), max(0.8,0,-1)).
	want := RerankScore{Dense: 0.96, Sparse: 0.225, ColBERT: 0.9}
	want.Score = 0.4*want.Dense + 0.2*want.Sparse + 0.4*want.ColBERT
	for name, got := range map[string][2]float64{"dense": {s.Dense, want.Dense}, "sparse": {s.Sparse, want.Sparse},
		"colbert": {s.ColBERT, want.ColBERT}, "score": {s.Score, want.Score}} {
		if math.Abs(got[0]-got[1]) > 1e-6 {
			t.Errorf("%s = %v, want %v", name, got[0], got[1])
		}
	}
	if s := HybridScore(&Item{}, d, DefaultRerankWeights); s.Score != 0 {
		t.Errorf("an empty query scores %v", s.Score)
	}
}

func TestDecodeRerankRequest(t *testing.T) {
	var l Limits
	ok := `{"id":"r","query":"q","texts":["a","b"],"weights":{"dense":1,"sparse":0,"colbert":0.5},"truncate":false,"unknown":[1]}`
	r, se := l.DecodeRerankRequest([]byte(ok), EncodingJSON)
	if se != nil || r.Query != "q" || len(r.Texts) != 2 || r.Weights == nil || r.Weights.ColBERT != 0.5 || r.Truncate == nil || *r.Truncate || r.V != Version {
		t.Fatalf("%+v %v", r, se)
	}
	mp, err := msgpack.Marshal(map[string]any{"id": "r", "query": "q", "texts": []string{"a"}, "weights": map[string]any{"dense": 1, "sparse": 0.5, "colbert": float32(0.25)}})
	if err != nil {
		t.Fatal(err)
	}
	if r, se := l.DecodeRerankRequest(mp, EncodingMsgpack); se != nil || r.Weights == nil || r.Weights.Dense != 1 || r.Weights.ColBERT != 0.25 {
		t.Fatalf("msgpack: %+v %v", r, se)
	}
	for _, c := range []struct {
		body string
		code Code
	}{
		{`{"id":"r","query":"q","texts":["a"],"query":"p"}`, CodeBadPayload},
		{`{"id":"r","QUERY":"q","texts":["a"]}`, CodeEmptyJob},
		{`{"id":"r","query":"q","texts":["a"],"weights":{"DENSE":1}}`, CodeBadPayload},
		{`{"id":"r","query":"q","texts":["a"],"weights":{"dense":-1}}`, CodeBadPayload},
		{`{"id":"r","query":"q","texts":["a"],"weights":{"dense":0,"sparse":0,"colbert":0}}`, CodeBadPayload},
		// Finite, but their scores are not (the attack review's finding 9).
		{`{"id":"r","query":"q","texts":["a"],"weights":{"dense":1e308,"sparse":1e308,"colbert":1e308}}`, CodeBadPayload},
		{`{"id":"r","query":"q","texts":["a"],"weights":{"dense":1000.5}}`, CodeBadPayload},
		{`{"id":"r","query":"q","texts":[]}`, CodeEmptyJob},
		{`{"query":"q","texts":["a"]}`, CodeMissingID},
		{`{"id":"r","query":"q","texts":["a"],"v":2}`, CodeBadVersion},
		{`{"id":"r","query":"q","texts":["a"],"x":1e999}`, CodeBadPayload},
		{`{"id":"r","query":"q","texts":["a"]} x`, CodeBadPayload},
		{`{"id":"r","query":"q","texts":[` + strings.Repeat(`"a",`, 1023) + `"a"]}`, CodeTooManyTexts},
	} {
		if _, se := l.DecodeRerankRequest([]byte(c.body), EncodingJSON); se == nil || se.Code != c.code {
			t.Errorf("%.80s: %v, want %s", c.body, se, c.code)
		}
	}
	if _, se := l.DecodeRerankRequest([]byte{0x82, 0xa2, 'i', 'd', 0xa1, 'r', 0xa2, 'i', 'd', 0xa1, 's'}, EncodingMsgpack); se == nil || se.Code != CodeBadPayload {
		t.Errorf("msgpack key twice: %v", se)
	}
}

func TestRerankRoundTrip(t *testing.T) {
	res := &RerankResult{V: 1, ID: "r", Model: "m@1", Scores: []RerankScore{{Index: 0, Score: 0.5, Dense: 0.1}, {Index: 1, Error: Errorf(CodeTextTooLong, "long")}},
		Usage: Usage{Tokens: 7}}
	for _, enc := range []Encoding{EncodingMsgpack, EncodingJSON} {
		data, err := EncodeRerankResult(res, enc)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeRerankResult(data, enc)
		if err != nil || got.ID != "r" || len(got.Scores) != 2 || got.Scores[0].Score != 0.5 || got.Scores[1].Error.Code != CodeTextTooLong || got.Usage.Tokens != 7 {
			t.Errorf("%s: %+v %v", enc, got, err)
		}
	}
	tr := &TokenizeRequest{V: 1, ID: "t", Texts: []string{"a", "b"}}
	data, _ := EncodeTokenizeRequest(tr, EncodingMsgpack)
	if got, se := (Limits{}).DecodeTokenizeRequest(data, EncodingMsgpack); se != nil || len(got.Texts) != 2 || got.AddSpecial != nil {
		t.Errorf("tokenize request: %+v %v", got, se)
	}
}

// FuzzDecodeRerankRequest: any bytes decode or fail with a *Error, in both
// encodings, and never panic.
func FuzzDecodeRerankRequest(f *testing.F) {
	for _, s := range []string{`{"id":"r","query":"q","texts":["a"]}`, `{"weights":{"dense":1}}`, `[]`, `{"texts":[1]}`} {
		f.Add([]byte(s))
	}
	mp, _ := msgpack.Marshal(map[string]any{"id": "r", "query": "q", "texts": []string{"a"}, "weights": map[string]any{"dense": 1}})
	f.Add(mp)
	f.Fuzz(func(t *testing.T, data []byte) {
		var l Limits
		for _, enc := range []Encoding{EncodingJSON, EncodingMsgpack} {
			if r, se := l.DecodeRerankRequest(data, enc); se == nil && (r.Query == "" || len(r.Texts) == 0 || r.ID == "") {
				t.Fatalf("%s: accepted %+v", enc, r)
			}
			_, _ = l.DecodeTokenizeRequest(data, enc)
		}
	})
}

// TestRerankWeightsCheck: weights are numbers from 0 to MaxRerankWeight,
// not all zero; at the bound every score of the largest parts stays
// finite.
func TestRerankWeightsCheck(t *testing.T) {
	for _, c := range []struct {
		w  RerankWeights
		ok bool
	}{
		{DefaultRerankWeights, true},
		{RerankWeights{Dense: MaxRerankWeight, Sparse: MaxRerankWeight, ColBERT: MaxRerankWeight}, true},
		{RerankWeights{Dense: 1e-9}, true},
		{RerankWeights{Dense: MaxRerankWeight + 1}, false},
		{RerankWeights{Sparse: 1e308}, false},
		{RerankWeights{ColBERT: math.Inf(1)}, false},
		{RerankWeights{Dense: math.NaN(), Sparse: 1}, false},
		{RerankWeights{Dense: -1e-9, Sparse: 1}, false},
		{RerankWeights{}, false},
	} {
		if err := c.w.Check(); (err == nil) != c.ok {
			t.Errorf("%+v: %v, want ok %v", c.w, err, c.ok)
		}
	}
	// The largest float32 sparse weights at the largest weights: finite.
	big := float32(math.MaxFloat32)
	q := &Item{Dense: Vector{1}, Sparse: &Sparse{IDs: []uint32{1}, Weights: Vector{big}}, ColBERT: []Vector{{1}}}
	s := HybridScore(q, q, RerankWeights{Dense: MaxRerankWeight, Sparse: MaxRerankWeight, ColBERT: MaxRerankWeight})
	if math.IsInf(s.Score, 0) || math.IsNaN(s.Score) {
		t.Errorf("score at the bounds: %v", s.Score)
	}
}
