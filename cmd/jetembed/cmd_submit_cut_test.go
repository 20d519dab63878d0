package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/schema"
)

// TestSubmitCutsJobsToMaxPayload: against a standard nats-server (1 MiB max
// payload), 24 texts of 100 KB with the default --job-size 32 are cut into
// jobs that fit; a 300 KB line (over the 256 KiB per-text limit) fails
// alone naming its line number; the run exits 1 with "1 of 25 lines
// failed". Before jobs were cut by bytes the whole run failed with
// "maximum payload exceeded".
func TestSubmitCutsJobsToMaxPayload(t *testing.T) {
	srv := natstest.RunServer(t, func(o *natsserver.Options) { o.MaxPayload = natsserver.MAX_PAYLOAD_SIZE })
	url := srv.ClientURL()
	// Texts are cut to 64 tokens: the test is about bytes, not the model.
	startServe(t, url, "--max-tokens", "64")
	var b strings.Builder
	word := strings.Repeat("abcdefghi ", 10_000) // 100 KB
	for i := range 25 {
		text := word
		if i == 7 {
			text = strings.Repeat("x", 300<<10)
		}
		fmt.Fprintf(&b, "{\"text\":%q}\n", text)
	}
	in := filepath.Join(t.TempDir(), "big.jsonl")
	if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code, _, errOut := runCmd(t, ctx, "submit", "--nats", url, in, "-o", out)
	if code != 1 || !strings.Contains(errOut, "1 of 25 lines failed") {
		t.Fatalf("submit: exit %d, want 1 with one failed line: %s", code, errOut)
	}
	// A first run says its id first: `jetembed results RUN` reads it.
	if !regexp.MustCompile(`^run r[0-9a-f]+\n`).MatchString(errOut) {
		t.Errorf("submit did not say its run first: %q", errOut)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 25)
	for i := range ids {
		ids[i] = fmt.Sprint(i + 1)
	}
	checkOutputLines(t, string(data), ids)
	for i, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var l outputLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatal(err)
		}
		if i == 7 {
			if l.Error == nil || l.Error.Code != schema.CodeJobTooLarge || !strings.Contains(l.Error.Message, "line 8") {
				t.Errorf("line 8: %+v, want job_too_large naming line 8", l.Error)
			}
			continue
		}
		if l.Error != nil || len(l.Dense) == 0 {
			t.Errorf("line %d: %+v", i+1, l.Error)
		}
	}

	if code, _, errOut := runCmd(t, ctx, "submit", "--nats", url, "--job-size", "2000", in); code != 2 || !strings.Contains(errOut, "1024") {
		t.Errorf("--job-size 2000: exit %d, want a usage error naming the limit: %s", code, errOut)
	}
}

// TestSubmitWaitsForConsumer: with NATS up and the streams provisioned but
// no consumer, submit says it is waiting for one (read from the consumer's
// info) instead of showing nothing, and when it stops, its last line counts
// only the texts actually answered.
func TestSubmitWaitsForConsumer(t *testing.T) {
	srv := natstest.RunServer(t)
	url := srv.ClientURL()
	if code, _, errOut := runCmd(t, context.Background(), "provision", "--nats", url); code != 0 {
		t.Fatal(errOut)
	}
	in, _ := submitInput(t, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	code, _, errOut := runCmd(t, ctx, "submit", "--nats", url, in, "-o", filepath.Join(t.TempDir(), "out.jsonl"))
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if !strings.Contains(errOut, "waiting for a consumer on EMBED_JOBS/embedder") {
		t.Errorf("no waiting-for-a-consumer status:\n%s", errOut)
	}
	if !strings.Contains(errOut, "embedded 0 of 9 texts in") || strings.Contains(errOut, "100%") {
		t.Errorf("last line does not say nothing was embedded:\n%s", errOut)
	}
}

// TestSubmitResolvesBlobs: against a standard 1 MiB server, a job whose
// ColBERT result is about 1.4 MB comes back as a blob reference; submit and
// results both write the whole vectors.
func TestSubmitResolvesBlobs(t *testing.T) {
	srv := natstest.RunServer(t, func(o *natsserver.Options) { o.MaxPayload = natsserver.MAX_PAYLOAD_SIZE })
	url := srv.ClientURL()
	startServe(t, url)
	var b strings.Builder
	texts := bigColBERT("x").Texts
	ids := make([]string, len(texts))
	for i, text := range texts {
		ids[i] = fmt.Sprint(i + 1)
		fmt.Fprintf(&b, "{\"text\":%q}\n", text)
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, args := range [][]string{
		{"submit", "--nats", url, "--outputs", "colbert", "--run", "blobs", in, "-o", filepath.Join(dir, "submit.jsonl")},
		{"results", "--nats", url, "blobs", "-o", filepath.Join(dir, "results.jsonl")},
	} {
		if code, _, errOut := runCmd(t, ctx, args...); code != 0 {
			t.Fatalf("%s: exit %d: %s", args[0], code, errOut)
		}
		out := readFile(t, args[len(args)-1])
		checkOutputLines(t, out, ids)
		for i, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var l outputLine
			if err := json.Unmarshal([]byte(line), &l); err != nil {
				t.Fatal(err)
			}
			if l.Error != nil || len(l.ColBERT) < 500 {
				t.Errorf("%s line %d: %d colbert rows, error %v", args[0], i+1, len(l.ColBERT), l.Error)
			}
		}
	}
}
