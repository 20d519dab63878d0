package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/schema"
)

// hybrid is BGE-M3's compute_score written out from FlagEmbedding: the
// dense dot product, the lexical match (sum over shared token ids of
// query weight x text weight) and the ColBERT max-sim (mean over query
// tokens of the best dot product with a text token), weighted.
func hybrid(q, d schema.Item, wd, ws, wc float64) float64 {
	dot := func(a, b []float32) float64 {
		s := 0.0
		for i := range a {
			s += float64(a[i]) * float64(b[i])
		}
		return s
	}
	dense := dot(q.Dense, d.Dense)
	lex := 0.0
	dw := map[uint32]float32{}
	for i, id := range d.Sparse.IDs {
		dw[id] = d.Sparse.Weights[i]
	}
	for i, id := range q.Sparse.IDs {
		lex += float64(q.Sparse.Weights[i]) * float64(dw[id])
	}
	col := 0.0
	for _, qv := range q.ColBERT {
		best := math.Inf(-1)
		for _, dv := range d.ColBERT {
			best = math.Max(best, dot(qv, dv))
		}
		col += best
	}
	col /= float64(len(q.ColBERT))
	return wd*dense + ws*lex + wc*col
}

// TestRerankMatchesHybridFormula: the scores of POST /rerank (TEI), POST
// /v1/rerank (Cohere/Jina) and the embed.v1.rerank endpoint through the Go
// client equal the hybrid formula computed from `jetembed embed`'s own
// dense, sparse and ColBERT outputs within 1e-4, at the default weights
// (0.4/0.2/0.4) and at weights given per call; and the other TEI routes
// answer what `jetembed embed` and the model's tokenizer give.
func TestRerankMatchesHybridFormula(t *testing.T) {
	model := tinyModel(t, "tiny-hidden")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := startAPIDev(ctx, t, model)
	query := "how do I reset my password"
	texts := []string{"Reset your password from the account page.", "The quick brown fox jumps over the lazy dog",
		"東京の天気は晴れです", "password password reset", "x"}
	items := localItems(t, model, "dense,sparse,colbert", append([]string{query}, texts...))
	want := func(wd, ws, wc float64) []float64 {
		out := make([]float64, len(texts))
		for i := range texts {
			out[i] = hybrid(items[0], items[i+1], wd, ws, wc)
		}
		return out
	}
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-4 {
			t.Errorf("%s: %v, want %v", what, got, want)
		}
	}

	def := want(0.4, 0.2, 0.4)
	var tei []struct {
		Index int     `json:"index"`
		Score float64 `json:"score"`
	}
	body, _ := json.Marshal(map[string]any{"query": query, "texts": texts})
	if code := httpJSON(t, d.api+"/rerank", "", string(body), &tei); code != 200 || len(tei) != len(texts) {
		t.Fatalf("/rerank: %d %+v", code, tei)
	}
	for i, r := range tei {
		near(fmt.Sprintf("/rerank text %d", r.Index), r.Score, def[r.Index])
		if i > 0 && tei[i-1].Score < r.Score {
			t.Errorf("/rerank not best first: %+v", tei)
		}
	}

	w := want(1, 0.5, 0.25)
	var v1 struct {
		Results []struct {
			Index          int     `json:"index"`
			RelevanceScore float64 `json:"relevance_score"`
		} `json:"results"`
	}
	body, _ = json.Marshal(map[string]any{"query": query, "documents": texts, "weights": map[string]float64{"dense": 1, "sparse": 0.5, "colbert": 0.25}})
	if code := httpJSON(t, d.api+"/v1/rerank", "", string(body), &v1); code != 200 || len(v1.Results) != len(texts) {
		t.Fatalf("/v1/rerank: %d %+v", code, v1)
	}
	for _, r := range v1.Results {
		near(fmt.Sprintf("/v1/rerank text %d", r.Index), r.RelevanceScore, w[r.Index])
	}

	// The NATS endpoint, through the Go client.
	nc, err := nats.Connect(d.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	res, err := c.Rerank(rctx, query, texts...)
	if err != nil || len(res.Scores) != len(texts) {
		t.Fatalf("client.Rerank: %+v %v", res, err)
	}
	for i, sc := range res.Scores {
		near(fmt.Sprintf("client text %d", i), sc.Score, def[i])
		near(fmt.Sprintf("client text %d dense", i), sc.Dense, hybrid(items[0], items[i+1], 1, 0, 0))
		near(fmt.Sprintf("client text %d sparse", i), sc.Sparse, hybrid(items[0], items[i+1], 0, 1, 0))
		near(fmt.Sprintf("client text %d colbert", i), sc.ColBERT, hybrid(items[0], items[i+1], 0, 0, 1))
	}
	if _, err := c.RerankRequest(rctx, &schema.RerankRequest{Query: query, Texts: texts, Weights: &schema.RerankWeights{Dense: -1}}); !strings.Contains(fmt.Sprint(err), "bad_payload") {
		t.Errorf("negative weights over NATS: %v", err)
	}

	// TEI's embedding routes and tokenize against the local outputs.
	var dense [][]float64
	body, _ = json.Marshal(map[string]any{"inputs": texts})
	if code := httpJSON(t, d.api+"/embed", "", string(body), &dense); code != 200 || len(dense) != len(texts) {
		t.Fatalf("/embed: %d", code)
	}
	var all [][][]float64
	if code := httpJSON(t, d.api+"/embed_all", "", string(body), &all); code != 200 || len(all) != len(texts) {
		t.Fatalf("/embed_all: %d", code)
	}
	var sp [][]struct {
		Index uint32  `json:"index"`
		Value float64 `json:"value"`
	}
	if code := httpJSON(t, d.api+"/embed_sparse", "", string(body), &sp); code != 200 || len(sp) != len(texts) {
		t.Fatalf("/embed_sparse: %d", code)
	}
	for i := range texts {
		it := items[i+1]
		near32(t, fmt.Sprintf("/embed[%d]", i), dense[i], it.Dense)
		if len(all[i]) != len(it.ColBERT) {
			t.Fatalf("/embed_all[%d]: %d rows, want %d", i, len(all[i]), len(it.ColBERT))
		}
		for j := range it.ColBERT {
			near32(t, fmt.Sprintf("/embed_all[%d][%d]", i, j), all[i][j], it.ColBERT[j])
		}
		if len(sp[i]) != len(it.Sparse.IDs) {
			t.Fatalf("/embed_sparse[%d]: %d values, want %d", i, len(sp[i]), len(it.Sparse.IDs))
		}
		for j, v := range sp[i] {
			if v.Index != it.Sparse.IDs[j] || math.Abs(v.Value-float64(it.Sparse.Weights[j])) > 1e-5 {
				t.Errorf("/embed_sparse[%d][%d] = %+v, want %d %v", i, j, v, it.Sparse.IDs[j], it.Sparse.Weights[j])
			}
		}
	}
	var toks [][]struct {
		ID      int    `json:"id"`
		Text    string `json:"text"`
		Special bool   `json:"special"`
	}
	if code := httpJSON(t, d.api+"/tokenize", "", string(body), &toks); code != 200 || len(toks) != len(texts) {
		t.Fatalf("/tokenize: %d", code)
	}
	for i := range texts {
		if len(toks[i]) != items[i+1].Tokens || !toks[i][0].Special || toks[i][0].Text != "<s>" || toks[i][len(toks[i])-1].Text != "</s>" {
			t.Errorf("/tokenize[%d]: %+v, want %d tokens from <s> to </s>", i, toks[i], items[i+1].Tokens)
		}
	}
	var info map[string]any
	if code := httpJSON(t, d.api+"/info", "", "", &info); code != 200 || info["max_input_length"] != 8192.0 || info["model_id"] == "" {
		t.Errorf("/info: %d %v", code, info)
	}
	if resp, err := http.Get(d.api + "/health"); err != nil || resp.StatusCode != 200 {
		t.Errorf("/health: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}
