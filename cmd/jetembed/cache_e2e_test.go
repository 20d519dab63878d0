package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/internal/natstest"
)

// TestCacheBucketDeletedMidRun: serve --cache kv through a real server.
// A repeat is answered from the cache; then the bucket is deleted under
// the running fleet: every job of the next run is still computed and
// answered (nothing lost, nothing refused), and once provision made the
// bucket again the cache fills and answers again.
func TestCacheBucketDeletedMidRun(t *testing.T) {
	srv := natstest.RunServer(t)
	s := startServe(t, srv.ClientURL(), "--cache", "kv")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	texts := []string{"a licence header", "a footer", "a chunk of text", "another chunk"}
	var in strings.Builder
	for i, x := range texts {
		fmt.Fprintf(&in, `{"id":"t%d","text":%q}`+"\n", i, x)
	}
	inFile := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(inFile, []byte(in.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	submit := func(run string) string {
		t.Helper()
		out := filepath.Join(dir, run+".jsonl")
		code, _, errOut := runCmd(t, ctx, "submit", "--nats", srv.ClientURL(), "--tenant", "acme", "--run", run, inFile, "-o", out)
		if code != 0 {
			t.Fatalf("submit %s: exit %d: %s", run, code, errOut)
		}
		checkSubmitLines(t, out, len(texts))
		return errOut
	}
	const hit = "4 of 4 texts came from the fleet's cache"
	submit("first")
	if got := submit("again"); !strings.Contains(got, hit) {
		t.Fatalf("repeat: %s, want %q", got, hit)
	}

	nc := natstest.Connect(t, srv.ClientURL())
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(ctx, "EMBED_CACHE"); err != nil {
		t.Fatal(err)
	}
	if got := submit("without"); strings.Contains(got, "from the fleet's cache") {
		t.Errorf("answered from a deleted bucket: %s", got)
	}
	if !strings.Contains(s.log.String(), "the result cache failed") {
		t.Errorf("no warning about the missing bucket:\n%s", s.log.String())
	}

	if code, out, errOut := runCmd(t, ctx, "provision", "--nats", srv.ClientURL()); code != 0 {
		t.Fatalf("provision: exit %d: %s%s", code, out, errOut)
	}
	// The process leaves a failing cache alone for a few seconds: runs
	// until the cache answers again, each one complete.
	for i := 0; ; i++ {
		if got := submit(fmt.Sprint("after", i)); strings.Contains(got, hit) {
			break
		}
		if i == 20 {
			t.Fatal("the cache never answered again after provision made the bucket")
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// checkSubmitLines checks that submit wrote n result lines, none failed.
func checkSubmitLines(t *testing.T, path string, n int) {
	t.Helper()
	lines := readOutput(t, path)
	if len(lines) != n {
		t.Fatalf("%s: %d lines, want %d", path, len(lines), n)
	}
	for i, l := range lines {
		if l.Error != nil || len(l.Dense) == 0 {
			t.Fatalf("%s: line %d: %+v", path, i, l)
		}
	}
}
