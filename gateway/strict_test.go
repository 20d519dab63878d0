package gateway_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestStrictRequests is reproduction 5 of issue 24: the request JSON
// follows the wire contract's rules (exact field names, no key twice,
// numbers a float64 holds, bounded nesting), the Content-Type is JSON and
// nothing else, a Content-Encoding the gateway does not decode is refused,
// and no answer echoes more than a few dozen bytes of what was sent.
func TestStrictRequests(t *testing.T) {
	r := newRig(t, true, nil)
	big := strings.Repeat("m", 1<<20)
	cases := []struct {
		name, path, body string
		header           []string
		status           int
		code             string
	}{
		{"duplicate key", "/v1/embeddings", `{"input":"a","input":"b"}`, nil, 400, "invalid_json"},
		{"duplicate key deep", "/v1/embeddings", `{"input":"a","user":{"x":1,"x":2}}`, nil, 400, "invalid_json"},
		{"field name case", "/v1/embeddings", `{"INPUT":"a"}`, nil, 400, "invalid_json"},
		{"field name case beside the field", "/v1/embeddings", `{"input":"a","Model":"x"}`, nil, 400, "invalid_json"},
		{"number out of range", "/v1/embeddings", `{"input":"a","user":1e999}`, nil, 400, "invalid_json"},
		{"too deep", "/v1/embeddings", `{"input":"a","user":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, nil, 400, "invalid_json"},
		{"two values", "/v1/embeddings", `{"input":"a"} {"input":"b"}`, nil, 400, "invalid_json"},
		{"not an object", "/v1/embeddings", `["a"]`, nil, 400, "invalid_json"},
		{"jsonx", "/v1/embeddings", `{"input":"a"}`, []string{"Content-Type", "application/jsonx"}, 415, "unsupported_media_type"},
		{"json with a parameter", "/v1/embeddings", `{"input":"a"}`, []string{"Content-Type", "application/json; boundary=x"}, 415, "unsupported_media_type"},
		{"latin-1 json", "/v1/embeddings", `{"input":"a"}`, []string{"Content-Type", "application/json; charset=latin1"}, 415, "unsupported_media_type"},
		{"gzip", "/v1/embeddings", `{"input":"a"}`, []string{"Content-Encoding", "gzip"}, 415, "unsupported_content_encoding"},
		{"tei inputs case", "/embed", `{"Inputs":"a"}`, nil, 400, "invalid_json"},
		{"tei duplicate", "/embed", `{"inputs":"a","inputs":"b"}`, nil, 400, "invalid_json"},
		{"rerank weights case", "/rerank", `{"query":"q","texts":["a"],"weights":{"DENSE":1}}`, nil, 400, "invalid_weights"},
		{"huge model", "/v1/embeddings", `{"input":"a","model":"` + big + `"}`, nil, 404, "model_not_found"},
		{"huge encoding_format", "/v1/embeddings", `{"input":"a","encoding_format":"` + big + `"}`, nil, 400, "invalid_encoding_format"},
		{"huge path", "/" + big[:60000], `{}`, nil, 404, "not_found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := r.post(t, c.path, c.body, c.header...)
			if a.status != c.status || a.errField("code") != c.code {
				t.Fatalf("got %d %.300s, want %d %s", a.status, a.body, c.status, c.code)
			}
			if len(a.body) > 1024 {
				t.Errorf("the answer is %d bytes: it echoes the request", len(a.body))
			}
		})
	}
	// What is allowed stays allowed: no Content-Type, charset=utf-8,
	// identity, and fields the gateway does not know.
	for _, h := range [][]string{{"Content-Type", ""}, {"Content-Type", "application/json; charset=UTF-8"}, {"Content-Encoding", "identity"}} {
		req, _ := http.NewRequest(http.MethodPost, r.url+"/v1/embeddings", strings.NewReader(`{"input":"a","user":"u-1","extra":{"k":[1,2]}}`))
		req.Header.Set(h[0], h[1])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: %q: %d", h[0], h[1], resp.StatusCode)
		}
	}
}
