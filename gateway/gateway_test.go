package gateway_test

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetembed/jetembed/gateway"
	"github.com/jetembed/jetembed/internal/natstest"
)

func floats(t *testing.T, v any) []float32 {
	t.Helper()
	switch x := v.(type) {
	case []any:
		out := make([]float32, len(x))
		for i, f := range x {
			out[i] = float32(f.(float64))
		}
		return out
	case string:
		b, err := base64.StdEncoding.DecodeString(x)
		if err != nil || len(b)%4 != 0 {
			t.Fatalf("bad base64 vector %q: %v", x, err)
		}
		out := make([]float32, len(b)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return out
	}
	t.Fatalf("vector of type %T", v)
	return nil
}

func close32(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Abs(float64(x-y)) < 1e-6 })
}

func data(t *testing.T, a answer) []map[string]any {
	t.Helper()
	if a.status != http.StatusOK {
		t.Fatalf("status %d: %s", a.status, a.body)
	}
	var out []map[string]any
	for _, d := range a.json["data"].([]any) {
		out = append(out, d.(map[string]any))
	}
	return out
}

func TestEmbeddingsStringAndArray(t *testing.T) {
	r := newRig(t, true, func(c *gateway.Config) { c.JobTexts = 2 })
	a := r.post(t, "/v1/embeddings", `{"input":"hello","model":"bge-m3"}`)
	d := data(t, a)
	if len(d) != 1 || d[0]["object"] != "embedding" || d[0]["index"] != 0.0 || a.json["object"] != "list" || a.json["model"] != fakeModel {
		t.Fatalf("answer %s", a.body)
	}
	if got := floats(t, d[0]["embedding"]); !close32(got, fakeDense("hello")) {
		t.Errorf("embedding %v", got)
	}
	if u := a.json["usage"].(map[string]any); u["prompt_tokens"] != 7.0 || u["total_tokens"] != 7.0 {
		t.Errorf("usage %v", u)
	}

	// Seven inputs over jobs of two: four fleet jobs, reassembled in order.
	texts := []string{"a", "bb", "ccc", "dddd", "eeeee", "ffffff", "g"}
	before := len(r.fake.jobSizes())
	body := fmt.Sprintf(`{"input":["%s"],"model":"BAAI/bge-m3","encoding_format":"base64"}`, strings.Join(texts, `","`))
	d = data(t, r.post(t, "/v1/embeddings", body))
	if len(d) != len(texts) {
		t.Fatalf("%d items for %d inputs", len(d), len(texts))
	}
	for i, it := range d {
		if it["index"] != float64(i) || !close32(floats(t, it["embedding"]), fakeDense(texts[i])) {
			t.Errorf("item %d: %v", i, it)
		}
	}
	sizes := r.fake.jobSizes()[before:]
	slices.Sort(sizes)
	if !slices.Equal(sizes, []int{1, 2, 2, 2}) {
		t.Errorf("fleet jobs of %v texts, want 2,2,2,1", sizes)
	}
}

func TestSeedEndpoints(t *testing.T) {
	r := newRig(t, true, nil)
	d := data(t, r.post(t, "/v1/sparse-embeddings", `{"input":["abc","de"]}`))
	for i, want := range []float64{3, 2} {
		sp := d[i]["sparse"].(map[string]any)
		if d[i]["object"] != "sparse_embedding" || d[i]["embedding"] != nil || sp["indices"].([]any)[0] != want || sp["values"].([]any)[0] != 0.5 {
			t.Errorf("sparse item %d: %v", i, d[i])
		}
	}
	d = data(t, r.post(t, "/v1/embeddings:both", `{"input":["abc"],"colbert":true}`))
	if d[0]["sparse"] == nil || !close32(floats(t, d[0]["embedding"]), fakeDense("abc")) {
		t.Errorf("both item: %v", d[0])
	}
	if cb := d[0]["colbert"].([]any); len(cb) != 2 || !close32(floats(t, cb[1]), fakeDense("abcx")) {
		t.Errorf("colbert %v", d[0]["colbert"])
	}
	d = data(t, r.post(t, "/v1/embeddings:both", `{"input":"abc"}`))
	if d[0]["colbert"] != nil {
		t.Errorf("colbert without asking: %v", d[0])
	}
}

// TestErrorMapping checks the answer to every stable code of the wire
// contract, and to every refusal of the gateway's own.
func TestErrorMapping(t *testing.T) {
	r := newRig(t, true, func(c *gateway.Config) {
		c.MaxInputs = 3
		c.MaxBodyBytes = 1000
		c.MaxTextBytes = 100
		c.ColBERTBytes = 50
	})
	data(t, r.post(t, "/v1/embeddings", `{"input":"learn the dimension"}`))
	cases := []struct {
		name, path, body string
		status           int
		typ, code        string
		retry            bool
	}{
		{"bad_payload", "", `{"input":"code:bad_payload"}`, 400, "invalid_request_error", "bad_payload", false},
		{"bad_version", "", `{"input":"code:bad_version"}`, 500, "server_error", "bad_version", false},
		{"missing_id", "", `{"input":"code:missing_id"}`, 500, "server_error", "missing_id", false},
		{"empty_job", "", `{"input":"code:empty_job"}`, 400, "invalid_request_error", "empty_job", false},
		{"too_many_texts", "", `{"input":"code:too_many_texts"}`, 413, "invalid_request_error", "too_many_texts", false},
		{"job_too_large", "", `{"input":"code:job_too_large"}`, 413, "invalid_request_error", "job_too_large", false},
		{"unknown_output", "", `{"input":"code:unknown_output"}`, 400, "invalid_request_error", "unknown_output", false},
		{"text_too_long", "", `{"input":["ok","item:text_too_long"]}`, 400, "invalid_request_error", "text_too_long", false},
		{"invalid_utf8", "", `{"input":"item:invalid_utf8"}`, 400, "invalid_request_error", "invalid_utf8", false},
		{"shape_not_warmed", "", `{"input":"code:shape_not_warmed"}`, 503, "server_error", "shape_not_warmed", true},
		{"engine_unavailable", "", `{"input":"code:engine_unavailable"}`, 503, "server_error", "engine_unavailable", true},
		{"overloaded", "", `{"input":"code:overloaded"}`, 429, "rate_limit_error", "overloaded", true},
		{"quota_exceeded", "", `{"input":"code:quota_exceeded"}`, 429, "rate_limit_error", "quota_exceeded", true},
		{"deadline_exceeded", "", `{"input":"code:deadline_exceeded"}`, 504, "server_error", "deadline_exceeded", false},
		{"internal", "", `{"input":"code:internal"}`, 500, "server_error", "internal", false},
		{"bad_reply", "", `{"input":"code:bad_reply"}`, 502, "server_error", "bad_reply", false},
		{"a newer fleet's code", "", `{"input":"code:brand_new"}`, 502, "server_error", "brand_new", false},
		{"token ids", "", `{"input":[1,2,3]}`, 400, "invalid_request_error", "token_ids_unsupported", false},
		{"token id arrays", "", `{"input":[[1,2],[3]]}`, 400, "invalid_request_error", "token_ids_unsupported", false},
		{"dimensions", "", `{"input":"a","dimensions":256}`, 400, "invalid_request_error", "dimensions_unsupported", false},
		{"encoding_format", "", `{"input":"a","encoding_format":"int8"}`, 400, "invalid_request_error", "invalid_encoding_format", false},
		{"no input", "", `{"model":"bge-m3"}`, 400, "invalid_request_error", "invalid_input", false},
		{"empty input", "", `{"input":[]}`, 400, "invalid_request_error", "invalid_input", false},
		{"input of objects", "", `{"input":[{"text":"a"}]}`, 400, "invalid_request_error", "invalid_input", false},
		{"not json", "", `{"input":`, 400, "invalid_request_error", "invalid_json", false},
		{"too many inputs", "", `{"input":["a","b","c","d"]}`, 400, "invalid_request_error", "too_many_inputs", false},
		{"body too large", "", `{"input":"` + strings.Repeat("x", 2000) + `"}`, 413, "invalid_request_error", "body_too_large", false},
		{"text too large", "", `{"input":"` + strings.Repeat("x", 200) + `"}`, 413, "invalid_request_error", "job_too_large", false},
		{"colbert too large", "/v1/embeddings:both", `{"input":["` + strings.Repeat("x", 30) + `","` + strings.Repeat("y", 30) + `"],"colbert":true}`, 413, "invalid_request_error", "colbert_too_large", false},
		{"unknown model", "", `{"input":"a","model":"text-embedding-3-small"}`, 404, "invalid_request_error", "model_not_found", false},
		{"unknown path", "/v1/chat/completions", `{}`, 404, "invalid_request_error", "not_found", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := c.path
			if path == "" {
				path = "/v1/embeddings"
			}
			a := r.post(t, path, c.body)
			if a.status != c.status || a.errField("type") != c.typ || a.errField("code") != c.code || a.errField("message") == "" {
				t.Fatalf("got %d %s, want %d %s/%s", a.status, a.body, c.status, c.typ, c.code)
			}
			if got := a.header.Get("Retry-After") != ""; got != c.retry {
				t.Errorf("Retry-After %q, want one: %v", a.header.Get("Retry-After"), c.retry)
			}
			// The fleet's retry-after (7.5 s), rounded up to whole seconds.
			if c.code == "quota_exceeded" && a.header.Get("Retry-After") != "8" {
				t.Errorf("quota_exceeded: Retry-After %q, want the fleet's 7.5 s as 8", a.header.Get("Retry-After"))
			}
		})
	}
	a := r.post(t, "/v1/embeddings", `{"input":["ok","ok","item:text_too_long"]}`)
	if !strings.HasPrefix(a.errField("message"), "input[2]: ") || a.json["error"].(map[string]any)["param"] != "input" {
		t.Errorf("item error does not name its input: %s", a.body)
	}
	if a := r.do(t, http.MethodGet, "/v1/embeddings", ""); a.status != 405 || a.errField("code") != "method_not_allowed" || a.header.Get("Allow") != "POST" {
		t.Errorf("GET /v1/embeddings: %d %s", a.status, a.body)
	}
	if a := r.post(t, "/v1/embeddings", `{"input":"a"}`, "Content-Type", "text/plain"); a.status != 415 {
		t.Errorf("text/plain body: %d %s", a.status, a.body)
	}
}

func TestNoMemberAndTimeout(t *testing.T) {
	r := newRig(t, false, func(c *gateway.Config) { c.Timeout = 300 * time.Millisecond })
	a := r.post(t, "/v1/embeddings", `{"input":"a"}`)
	if a.status != 503 || a.errField("code") != "no_member" || a.header.Get("Retry-After") == "" {
		t.Errorf("no fleet: %d %s", a.status, a.body)
	}
	if a := r.do(t, http.MethodGet, "/health", ""); a.status != 503 || !strings.Contains(string(a.body), "no member of the embed service answered") {
		t.Errorf("/health without a fleet: %d %s", a.status, a.body)
	}
	if a := r.do(t, http.MethodGet, "/v1/models", ""); a.status != 503 {
		t.Errorf("/v1/models without a fleet: %d %s", a.status, a.body)
	}
	startFakeFleet(t, r.nc)
	if a := r.post(t, "/v1/embeddings", `{"input":"slow"}`); a.status != 504 || a.errField("code") != "timeout" {
		t.Errorf("slow fleet: %d %s", a.status, a.body)
	}
}

func TestBusyGateway(t *testing.T) {
	r := newRig(t, true, func(c *gateway.Config) { c.MaxConcurrent, c.ClientConcurrent = 1, 10 })
	slow := make(chan answer, 1)
	go func() { slow <- r.post(t, "/v1/embeddings", `{"input":"slow"}`) }()
	natstest.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if r.fake.jobs.Load() == 0 {
			return errors.New("the slow job has not reached the fleet")
		}
		return nil
	})
	a := r.post(t, "/v1/embeddings", `{"input":"a"}`)
	if a.status != 429 || a.errField("code") != "gateway_busy" || a.header.Get("Retry-After") != "1" {
		t.Errorf("second call while the first is out: %d %s", a.status, a.body)
	}
	if a := <-slow; a.status != 200 {
		t.Errorf("slow call: %d %s", a.status, a.body)
	}
}

// TestSplitCallFailsWhole checks that one refused job of a split call
// fails the call with its code, and that an item error names its input's
// index in the whole call, not in its job.
func TestSplitCallFailsWhole(t *testing.T) {
	r := newRig(t, true, func(c *gateway.Config) { c.JobTexts = 2; c.Parallel = 2 })
	a := r.post(t, "/v1/embeddings", `{"input":["a","b","c","code:overloaded","e"]}`)
	if a.status != 429 || a.errField("code") != "overloaded" {
		t.Errorf("a split call with one overloaded job: %d %s", a.status, a.body)
	}
	// A job whose result is too large for one message is asked again in
	// halves.
	d := data(t, r.post(t, "/v1/embeddings", `{"input":["a","big","ccc"]}`))
	for i, text := range []string{"a", "big", "ccc"} {
		if !close32(floats(t, d[i]["embedding"]), fakeDense(text)) {
			t.Errorf("item %d after halving: %v", i, d[i])
		}
	}
	a = r.post(t, "/v1/embeddings", `{"input":"code:result_too_large"}`)
	if a.status != 413 || a.errField("code") != "result_too_large" {
		t.Errorf("one input too large alone: %d %s", a.status, a.body)
	}
	a = r.post(t, "/v1/embeddings", `{"input":["a","b","c","d","item:text_too_long"]}`)
	if a.status != 400 || !strings.HasPrefix(a.errField("message"), "input[4]: ") {
		t.Errorf("an item error in the third job: %d %s", a.status, a.body)
	}
}
