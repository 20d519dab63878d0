package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/schema"
)

// corpusTexts are the real texts of the tokenizer parity corpus (many
// languages and scripts), one a line, and all their words in order.
func corpusTexts(t *testing.T) (lines, words []string) {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "engine", "tokenizer", "testdata", "parity", "corpus.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for sc.Scan() {
		var l struct{ Text string }
		if json.Unmarshal(sc.Bytes(), &l) == nil && strings.TrimSpace(l.Text) != "" {
			lines = append(lines, l.Text)
			words = append(words, strings.Fields(l.Text)...)
		}
	}
	return lines, words
}

// indexingBatches are what a RAG framework sends when it indexes
// documents: 128 chunks of about 100 words, 64 of 300 words, and 100 mixed
// texts (60% short lines as they are, 40% paragraphs of 50 to 650 words),
// as scripts/mixed-corpus.py cuts them.
func indexingBatches(t *testing.T) map[string][]string {
	t.Helper()
	lines, words := corpusTexts(t)
	rng := rand.New(rand.NewPCG(13, 24))
	chunk := func(n int) string {
		at := rng.IntN(len(words) - n)
		return strings.Join(words[at:at+n], " ")
	}
	var short []string
	for _, l := range lines {
		if len(strings.Fields(l)) <= 40 {
			short = append(short, l)
		}
	}
	b := map[string][]string{}
	for range 128 {
		b["128x100w"] = append(b["128x100w"], chunk(90+rng.IntN(21)))
	}
	for range 64 {
		b["64x300w"] = append(b["64x300w"], chunk(300))
	}
	for range 100 {
		if rng.Float64() < 0.6 {
			b["100mixed"] = append(b["100mixed"], short[rng.IntN(len(short))])
		} else {
			b["100mixed"] = append(b["100mixed"], chunk(50+rng.IntN(601)))
		}
	}
	return b
}

// TestGatewayOpenAINodeBatches is reproduction 1 of issue 24: on an idle
// one-member `dev --http-api` at its defaults, the official OpenAI Node
// client at its defaults (its own retries and timeout) embeds the batches
// a document indexer sends, and so it does through `jetembed gateway`, and
// concurrent large requests on NATS are all answered. Before admission
// matched the work, every one of them was refused 429 overloaded: the
// gateway's concurrent sub-jobs overflowed the member's interactive
// budgets.
func TestGatewayOpenAINodeBatches(t *testing.T) {
	model := tinyModel(t, "tiny-hidden")
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed: the OpenAI Node client test needs Node.js (and `make deps`)")
	}
	modules := os.Getenv("JETEMBED_OPENAI_NODE")
	if modules == "" {
		modules = filepath.Join("..", "..", ".deps", "openai-node")
	}
	if _, err := os.Stat(filepath.Join(modules, "node_modules", "openai", "package.json")); err != nil {
		t.Skipf("the openai npm package is not installed in %s: run `make deps`", modules)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := startAPIDev(ctx, t, model)
	batches := indexingBatches(t)
	file := filepath.Join(t.TempDir(), "batches.json")
	data, _ := json.Marshal(batches)
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	runBatches := func(name, api string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, node, filepath.Join("..", "..", "scripts", "openai-node", "batches.cjs"), api+"/v1", file)
		cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(modules, "node_modules"))
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("node: %v: %s", err, out)
		}
		var got map[string]struct {
			OK      bool   `json:"ok"`
			N       int    `json:"n"`
			MS      int    `json:"ms"`
			Status  int    `json:"status"`
			Code    string `json:"code"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("node output %q: %v", out, err)
		}
		for batch, texts := range batches {
			r := got[batch]
			t.Logf("%s %s: %+v", name, batch, r)
			if !r.OK || r.N != len(texts) {
				t.Errorf("%s %s: the OpenAI client got %d %s %q, want %d vectors", name, batch, r.Status, r.Code, r.Message, len(texts))
			}
		}
	}
	runBatches("dev --http-api", d.api)

	// The same through `jetembed gateway` over NATS: its parts are sized by
	// the member's published capacity and wait in its window.
	gwLog := &lockedBuffer{}
	gwDone := make(chan int, 1)
	go func() {
		gwDone <- runMain(ctx, []string{"gateway", "--nats", d.url, "--listen", "127.0.0.1:0", "--http", "", "--log-format", "json"},
			stdio{in: strings.NewReader(""), out: io.Discard, err: gwLog})
	}()
	var api string
	natstest.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		if api = logValue(gwLog.String(), "http api listening", "addr"); api == "" || logValue(gwLog.String(), "ready", "nats") == "" {
			return fmt.Errorf("gateway not ready")
		}
		return nil
	})
	runBatches("jetembed gateway", "http://"+api)

	// And request-reply on NATS itself: six callers at once, each with 16
	// texts of 300 words (half the member's interactive budget each), all
	// answered with vectors: the requests wait their turn.
	nc, err := nats.Connect(d.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	big := batches["64x300w"][:16]
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			res, err := c.Request(rctx, schema.NewJob(fmt.Sprint("nats-", i), big...))
			if err != nil || len(res.Items) != len(big) {
				t.Errorf("request %d over NATS: %v", i, err)
			}
		})
	}
	wg.Wait()
}
