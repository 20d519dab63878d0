package main

import (
	"bufio"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
// a document indexer sends. Before admission matched the work, every one
// of them was refused 429 overloaded: the gateway's concurrent sub-jobs
// overflowed the member's interactive budgets.
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
	cmd := exec.CommandContext(ctx, node, filepath.Join("..", "..", "scripts", "openai-node", "batches.cjs"), d.api+"/v1", file)
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
	for name, texts := range batches {
		r := got[name]
		t.Logf("%s: %+v", name, r)
		if !r.OK || r.N != len(texts) {
			t.Errorf("%s: the OpenAI client got %d %s %q, want %d vectors", name, r.Status, r.Code, r.Message, len(texts))
		}
	}
}
