package jetstream_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// TestRerankEndpoint: embed.v1.rerank (bare and per tenant) and the
// worker's in-process Rerank score texts with the hybrid formula of the
// engine's own vectors; a bad request is answered with its code.
func TestRerankEndpoint(t *testing.T) {
	srv := newServer(t, nil)
	e := openEngine(t, engine.Config{})
	w := startWorker(t, srv, e, workerOptions{})
	query, texts := "reset my password", []string{"password reset page", "the weather", "x"}
	in := []engine.Text{{Text: query, Outputs: engine.Dense | engine.Sparse | engine.ColBERT, Truncate: true}}
	for _, x := range texts {
		in = append(in, engine.Text{Text: x, Outputs: engine.Dense | engine.Sparse | engine.ColBERT, Truncate: true})
	}
	embs, _, err := e.Embed(context.Background(), in, engine.Call{})
	if err != nil {
		t.Fatal(err)
	}
	item := func(em engine.Embedding) schema.Item { return em.Item(engine.Dense | engine.Sparse | engine.ColBERT) }
	q := item(embs[0])
	check := func(name string, res *schema.RerankResult, err error) {
		t.Helper()
		if err != nil || len(res.Scores) != len(texts) {
			t.Fatalf("%s: %+v %v", name, res, err)
		}
		for i := range texts {
			d := item(embs[i+1])
			want := schema.HybridScore(&q, &d, schema.DefaultRerankWeights).Score
			if got := res.Scores[i].Score; math.Abs(got-want) > 1e-4 || res.Scores[i].Index != i {
				t.Errorf("%s: text %d scored %v (index %d), want %v", name, i, got, res.Scores[i].Index, want)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.New(srv.nc)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Rerank(ctx, query, texts...)
	check("embed.v1.rerank", res, err)
	tc, err := client.New(srv.nc, client.WithTenant("alice"))
	if err != nil {
		t.Fatal(err)
	}
	// A tenant's answer goes to its own inbox only: this connection's
	// default inbox is outside alice's space.
	bctx, bcancel := context.WithTimeout(ctx, time.Second)
	if _, err := tc.Rerank(bctx, query, texts...); err == nil {
		t.Error("a tenant's rerank answered to an inbox outside its space")
	}
	bcancel()
	anc, err := nats.Connect(srv.url, nats.CustomInboxPrefix("_INBOX_alice"))
	if err != nil {
		t.Fatal(err)
	}
	defer anc.Close()
	if tc, err = client.New(anc, client.WithTenant("alice")); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	res, err = tc.Rerank(sctx, query, texts...)
	scancel()
	check("embed.v1.rerank.alice", res, err)
	res, err = w.w.Rerank(ctx, &schema.RerankRequest{ID: "local", Query: query, Texts: texts})
	check("Worker.Rerank", res, err)

	for _, bad := range []*schema.RerankRequest{
		{Query: query},
		{Query: "", Texts: texts},
		{Query: query, Texts: texts, Weights: &schema.RerankWeights{}},
		{Query: query, Texts: texts, Weights: &schema.RerankWeights{Dense: 1e308, Sparse: 1e308, ColBERT: 1e308}},
		{Query: strings.Repeat("q ", jetstream.DefaultRerankBytes), Texts: texts},
	} {
		if _, err := c.RerankRequest(ctx, bad); err == nil {
			t.Errorf("bad request %.40q answered without an error", bad.Query)
		}
	}
}

// TestTokenizeEndpoint: embed.v1.tokenize answers the tokenizer's tokens,
// and a tenant's request whose inbox is outside its space gets no answer.
func TestTokenizeEndpoint(t *testing.T) {
	srv := newServer(t, nil)
	tok := func(text string, special bool) ([]uint32, []string, []bool, int) {
		var ids []uint32
		var toks []string
		var sp []bool
		for _, w := range strings.Fields(text) {
			ids, toks, sp = append(ids, uint32(len(w))), append(toks, w), append(sp, false)
		}
		if special {
			ids, toks, sp = append([]uint32{0}, ids...), append([]string{"<s>"}, toks...), append([]bool{true}, sp...)
		}
		return ids, toks, sp, len(ids)
	}
	w := startWorker(t, srv, openEngine(t, engine.Config{}), workerOptions{tokenizer: tok})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(srv.nc)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Tokenize(ctx, "hello big world", "\xff")
	if err != nil || len(res.Items) != 2 || len(res.Items[0].IDs) != 4 || res.Items[0].Tokens[2] != "big" || !res.Items[0].Special[0] ||
		res.Items[1].Error == nil || res.Items[1].Error.Code != schema.CodeInvalidUTF8 {
		t.Fatalf("tokenize: %+v %v", res, err)
	}
	if res, err := w.w.Tokenize(ctx, &schema.TokenizeRequest{ID: "local", Texts: []string{"a b"}}); err != nil || len(res.Items[0].IDs) != 3 {
		t.Errorf("Worker.Tokenize: %+v %v", res, err)
	}
	tc, _ := client.New(srv.nc, client.WithTenant("bob"))
	short, scancel := context.WithTimeout(ctx, time.Second)
	defer scancel()
	if _, err := tc.Tokenize(short, "a"); err == nil {
		t.Error("a tenant's tokenize answered to an inbox outside its space")
	}
}

// TestRerankAnswerOverMaxPayload: a rerank whose answer (a score a text)
// would be over the server's max payload, though its request is well
// under it, is answered result_too_large at once, never sent to be
// refused by the server while the caller waits out its timeout.
func TestRerankAnswerOverMaxPayload(t *testing.T) {
	url := natstest.RunServer(t, func(o *natsserver.Options) { o.MaxPayload = 16 << 10 }).ClientURL()
	srv := provisioned(t, url, nil)
	startWorker(t, srv, openEngine(t, engine.Config{}), workerOptions{})
	c, err := client.New(srv.nc)
	if err != nil {
		t.Fatal(err)
	}
	texts := make([]string, 600)
	for i := range texts {
		texts[i] = "x y"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	res, err := c.RerankRequest(ctx, &schema.RerankRequest{ID: "big", Query: "x", Texts: texts})
	if !errors.Is(err, &schema.Error{Code: schema.CodeResultTooLarge}) || time.Since(start) > 20*time.Second {
		t.Errorf("a rerank of %d texts, its answer over a 16 KiB max payload: %+v %v after %s", len(texts), res, err, time.Since(start))
	}
	// One that fits is still answered.
	if res, err := c.Rerank(ctx, "x", "x y", "z"); err != nil || len(res.Scores) != 2 {
		t.Errorf("a small rerank on that server: %+v %v", res, err)
	}
}
