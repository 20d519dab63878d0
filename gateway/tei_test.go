package gateway_test

import (
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/jetembed/jetembed/gateway"
	"github.com/jetembed/jetembed/schema"
)

// TestTEIRoutes is reproduction 7 of issue 24: the routes of
// text-embeddings-inference answer in TEI's shapes, with TEI's field
// names, beside the OpenAI ones.
func TestTEIRoutes(t *testing.T) {
	r := newRig(t, true, func(c *gateway.Config) { c.JobTexts = 2 })
	texts := []string{"hello world", "b", "ccc"}
	body, _ := json.Marshal(map[string]any{"inputs": texts})

	var dense [][]float32
	a := r.post(t, "/embed", string(body))
	if a.status != 200 || json.Unmarshal(a.body, &dense) != nil || len(dense) != len(texts) {
		t.Fatalf("/embed: %d %s", a.status, a.body)
	}
	for i, text := range texts {
		if !close32(dense[i], fakeDense(text)) {
			t.Errorf("/embed[%d] = %v", i, dense[i])
		}
	}
	a = r.post(t, "/embed", `{"inputs":"one","normalize":true,"truncate":true,"truncation_direction":"Right"}`)
	if a.status != 200 || !strings.HasPrefix(string(a.body), "[[") {
		t.Errorf("/embed with one string: %d %s", a.status, a.body)
	}

	var sp [][]struct {
		Index uint32  `json:"index"`
		Value float32 `json:"value"`
	}
	if a := r.post(t, "/embed_sparse", string(body)); a.status != 200 || json.Unmarshal(a.body, &sp) != nil || len(sp) != 3 ||
		sp[0][0].Index != uint32(len(texts[0])) || sp[0][0].Value != 0.5 {
		t.Errorf("/embed_sparse: %d %s", a.status, a.body)
	}
	var all [][][]float32
	if a := r.post(t, "/embed_all", string(body)); a.status != 200 || json.Unmarshal(a.body, &all) != nil || len(all) != 3 ||
		len(all[2]) != 2 || !close32(all[2][1], fakeDense("cccx")) {
		t.Errorf("/embed_all: %d %s", a.status, a.body)
	}

	var tok [][]struct {
		ID      uint32 `json:"id"`
		Text    string `json:"text"`
		Special bool   `json:"special"`
		Start   *int   `json:"start"`
	}
	if a := r.post(t, "/tokenize", `{"inputs":["hello world"]}`); a.status != 200 || json.Unmarshal(a.body, &tok) != nil ||
		len(tok) != 1 || len(tok[0]) != 4 || tok[0][1].Text != "▁hello" || !tok[0][0].Special || tok[0][1].Special {
		t.Errorf("/tokenize: %d %s", a.status, a.body)
	}

	a = r.do(t, http.MethodGet, "/info", "")
	var info map[string]any
	if a.status != 200 || json.Unmarshal(a.body, &info) != nil || info["model_id"] != "bge-m3" || info["model_sha"] != "0123456789ab" ||
		info["max_client_batch_size"] != float64(gateway.DefaultMaxInputs) {
		t.Errorf("/info: %d %s", a.status, a.body)
	}

	for _, c := range []struct{ path, body, code string }{
		{"/embed", `{"inputs":"a","normalize":false}`, "unsupported_option"},
		{"/embed", `{"inputs":"a","truncation_direction":"Left"}`, "unsupported_option"},
		{"/embed", `{"inputs":"a","prompt_name":"query"}`, "unsupported_option"},
		{"/embed", `{"inputs":[1,2]}`, "token_ids_unsupported"},
		{"/embed", `{"input":"a"}`, "invalid_input"},
	} {
		if a := r.post(t, c.path, c.body); a.status != 400 || a.errField("code") != c.code {
			t.Errorf("%s %s: %d %s, want 400 %s", c.path, c.body, a.status, a.body, c.code)
		}
	}
}

// TestRerankRoutes: POST /rerank (TEI) and POST /v1/rerank (Cohere, Jina)
// score each text with the hybrid formula of the fleet's vectors, best
// first, with per-call weights; a call with more texts than one fleet
// request takes is split, each part with the query.
func TestRerankRoutes(t *testing.T) {
	r := newRig(t, true, func(c *gateway.Config) { c.JobTexts = 3 })
	query := "which is best"
	texts := []string{"a", "bbbbbbbbbbbbbb", "ccc", "dd", "eeeeeeeeeee"}
	want := func(w schema.RerankWeights) []float64 {
		q := fakeItem(query)
		out := make([]float64, len(texts))
		for i, text := range texts {
			it := fakeItem(text)
			out[i] = w.Dense*schema.HybridScore(&q, &it, schema.RerankWeights{Dense: 1}).Score +
				w.Sparse*schema.LexicalMatch(q.Sparse, it.Sparse) + w.ColBERT*schema.MaxSim(q.ColBERT, it.ColBERT)
		}
		return out
	}
	check := func(name string, got []struct {
		Index int     `json:"index"`
		Score float64 `json:"score"`
	}, w []float64) {
		t.Helper()
		if len(got) != len(w) {
			t.Fatalf("%s: %d scores, want %d", name, len(got), len(w))
		}
		for i, g := range got {
			if math.Abs(g.Score-w[g.Index]) > 1e-9 {
				t.Errorf("%s: text %d scored %v, want %v", name, g.Index, g.Score, w[g.Index])
			}
			if i > 0 && got[i-1].Score < g.Score {
				t.Errorf("%s: not best first: %v", name, got)
			}
		}
	}
	before := len(r.fake.jobSizes())
	body, _ := json.Marshal(map[string]any{"query": query, "texts": texts, "return_text": true, "raw_scores": false})
	a := r.post(t, "/rerank", string(body))
	var tei []struct {
		Index int     `json:"index"`
		Score float64 `json:"score"`
		Text  string  `json:"text"`
	}
	if a.status != 200 || json.Unmarshal(a.body, &tei) != nil {
		t.Fatalf("/rerank: %d %s", a.status, a.body)
	}
	var scores []struct {
		Index int     `json:"index"`
		Score float64 `json:"score"`
	}
	for _, x := range tei {
		scores = append(scores, struct {
			Index int     `json:"index"`
			Score float64 `json:"score"`
		}{x.Index, x.Score})
		if x.Text != texts[x.Index] {
			t.Errorf("text of %d: %q", x.Index, x.Text)
		}
	}
	check("/rerank", scores, want(schema.DefaultRerankWeights))
	// Parts of at most JobTexts-1 texts plus the query: 5 texts are three.
	sizes := r.fake.jobSizes()[before:]
	slices.Sort(sizes)
	if !slices.Equal(sizes, []int{2, 3, 3}) {
		t.Errorf("rerank requests of %v texts (query included), want [2 3 3]", sizes)
	}

	w := schema.RerankWeights{Dense: 1, Sparse: 0, ColBERT: 0}
	body, _ = json.Marshal(map[string]any{"model": "BAAI/bge-m3", "query": query, "documents": []any{"a", map[string]string{"text": "bbbbbbbbbbbbbb"}, "ccc", "dd", "eeeeeeeeeee"},
		"top_n": 2, "weights": map[string]float64{"dense": 1, "sparse": 0, "colbert": 0}})
	a = r.post(t, "/v1/rerank", string(body))
	var v1 struct {
		Model   string `json:"model"`
		Results []struct {
			Index          int     `json:"index"`
			RelevanceScore float64 `json:"relevance_score"`
			Document       struct {
				Text string `json:"text"`
			} `json:"document"`
		} `json:"results"`
		Usage struct {
			TotalTokens int `json:"total_tokens"`
		} `json:"usage"`
	}
	if a.status != 200 || json.Unmarshal(a.body, &v1) != nil || v1.Model != fakeModel || len(v1.Results) != 2 || v1.Usage.TotalTokens == 0 {
		t.Fatalf("/v1/rerank: %d %s", a.status, a.body)
	}
	wd := want(w)
	order := []int{0, 1, 2, 3, 4}
	slices.SortStableFunc(order, func(a, b int) int {
		if wd[a] > wd[b] {
			return -1
		} else if wd[a] < wd[b] {
			return 1
		}
		return 0
	})
	for i, res := range v1.Results {
		if res.Index != order[i] || math.Abs(res.RelevanceScore-wd[res.Index]) > 1e-9 || res.Document.Text != texts[res.Index] {
			t.Errorf("/v1/rerank result %d: %+v, want index %d score %v", i, res, order[i], wd[order[i]])
		}
	}

	for _, c := range []struct{ path, body, code string }{
		{"/rerank", `{"texts":["a"]}`, "invalid_input"},
		{"/rerank", `{"query":"q"}`, "invalid_input"},
		{"/rerank", `{"query":"q","texts":["a"],"weights":{"dense":-1}}`, "invalid_weights"},
		{"/rerank", `{"query":"q","texts":["a"],"weights":{"dense":0,"sparse":0,"colbert":0}}`, "invalid_weights"},
		{"/v1/rerank", `{"query":"q","documents":[{"txt":"a"}]}`, "invalid_input"},
		{"/v1/rerank", `{"query":"q","documents":["a"],"top_n":0}`, "invalid_input"},
	} {
		if a := r.post(t, c.path, c.body); a.status != 400 || a.errField("code") != c.code {
			t.Errorf("%s %s: %d %s, want 400 %s", c.path, c.body, a.status, a.body, c.code)
		}
	}
	if a := r.post(t, "/rerank", `{"query":"q","texts":["a","code:overloaded"]}`); a.status != 429 || a.errField("code") != "overloaded" {
		t.Errorf("a refused part: %d %s", a.status, a.body)
	}
}

// TestTokenizeAnswerSplit: a TEI /tokenize call whose answer would be over
// one message (2.5 to 10 times its text) is asked of the fleet in parts,
// halved again while the fleet answers result_too_large, and answered
// whole; a single input whose tokens alone are over one message is 413
// result_too_large, never a wait for the timeout.
func TestTokenizeAnswerSplit(t *testing.T) {
	r := newRig(t, true, nil)
	text := strings.Repeat("a ", 10<<10) // 20 KiB, about 110 KiB of answer
	inputs := []string{text, text, text, text, text, text, "b"}
	body, _ := json.Marshal(map[string]any{"inputs": inputs})
	a := r.post(t, "/tokenize", string(body))
	var tok [][]struct {
		ID   uint32 `json:"id"`
		Text string `json:"text"`
	}
	if a.status != 200 || json.Unmarshal(a.body, &tok) != nil || len(tok) != len(inputs) {
		t.Fatalf("/tokenize of six 20 KiB inputs and one word: %d %.200s", a.status, a.body)
	}
	for i, want := range []int{10<<10 + 2, 10<<10 + 2, 10<<10 + 2, 10<<10 + 2, 10<<10 + 2, 10<<10 + 2, 3} {
		if len(tok[i]) != want || tok[i][1].Text == "" {
			t.Errorf("input %d: %d tokens, want %d", i, len(tok[i]), want)
		}
	}
	big := strings.Repeat("a ", 50<<10)
	if a := r.post(t, "/tokenize", `{"inputs":["`+big+`"]}`); a.status != 413 || !strings.Contains(string(a.body), "result_too_large") {
		t.Errorf("/tokenize of one input whose tokens are over one message: %d %.200s", a.status, a.body)
	}
}
