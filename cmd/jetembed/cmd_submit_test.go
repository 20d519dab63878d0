package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/schema"
)

// submitInput writes n input lines, every seventh one broken, and returns
// the file and the texts (empty for broken lines).
func submitInput(t *testing.T, n int) (string, []string) {
	t.Helper()
	var b strings.Builder
	texts := make([]string, n)
	for i := range n {
		switch {
		case i%7 == 3:
			b.WriteString("{not json\n")
		case i%5 == 0:
			texts[i] = fmt.Sprintf("line %d has its own id", i)
			fmt.Fprintf(&b, `{"id":"doc-%d","text":%q}`+"\n", i, texts[i])
		default:
			texts[i] = fmt.Sprintf("text number %d, some words", i)
			fmt.Fprintf(&b, `{"text":%q}`+"\n", texts[i])
		}
	}
	p := filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p, texts
}

type outLine = outputLine

// checkSubmitOutput checks one output line per input line, in order, with
// the id and a dense vector equal to the local embed command's.
func checkSubmitOutput(t *testing.T, path string, texts []string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	ids := make([]string, len(texts))
	for i := range ids {
		ids[i] = fmt.Sprint(i + 1)
		if i%5 == 0 && i%7 != 3 {
			ids[i] = fmt.Sprintf("doc-%d", i)
		}
	}
	checkOutputLines(t, string(data), ids)
	if len(lines) != len(texts) {
		t.Fatalf("%d output lines for %d input lines", len(lines), len(texts))
	}
	var stdin strings.Builder
	for _, s := range texts {
		if s != "" {
			fmt.Fprintf(&stdin, "{\"text\":%q}\n", s)
		}
	}
	code, local, errOut := run(t, stdin.String(), "embed", "--model", tinyModel(t, "tiny-hidden"), "--threads", "1")
	if code != 0 {
		t.Fatalf("embed: %s", errOut)
	}
	want := decodeItems(t, local)
	k := 0
	for i, line := range lines {
		var got outLine
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatalf("line %d %q: %v", i, line, err)
		}
		wantID := fmt.Sprint(i + 1)
		if i%5 == 0 && i%7 != 3 {
			wantID = fmt.Sprintf("doc-%d", i)
		}
		if got.ID != wantID {
			t.Errorf("line %d: id %q, want %q", i, got.ID, wantID)
		}
		if texts[i] == "" {
			if got.Error == nil || got.Error.Code != schema.CodeBadPayload {
				t.Errorf("line %d: broken input answered %s", i, line)
			}
			continue
		}
		w := want[k]
		k++
		if got.Error != nil || got.Tokens != w.Tokens || len(got.Dense) != len(w.Dense) {
			t.Errorf("line %d: %s", i, line)
			continue
		}
		for d := range got.Dense {
			if diff := got.Dense[d] - w.Dense[d]; diff > 1e-4 || diff < -1e-4 {
				t.Errorf("line %d: dense differs from the local embed at %d", i, d)
				break
			}
		}
	}
}

func TestSubmitEndToEndAndResume(t *testing.T) {
	srv := natstest.RunServer(t)
	url := srv.ClientURL()
	in, texts := submitInput(t, 45)
	dir := t.TempDir()

	// Provisioned, but nobody serves yet: the run stops half way.
	if code, _, errOut := runCmd(t, context.Background(), "provision", "--nats", url); code != 0 {
		t.Fatal(errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	code, _, errOut := runCmd(t, ctx, "submit", "--nats", url, "--job-size", "4", "--max-inflight", "3", "--json", in, "-o", filepath.Join(dir, "first.jsonl"))
	if code != 1 || !strings.Contains(errOut, "resume") {
		t.Fatalf("interrupted submit: exit %d: %s", code, errOut)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := natsjs.New(nc)
	if n := natstest.StreamCount(t, js, "EMBED_JOBS"); n != 3 {
		t.Fatalf("%d jobs queued by the interrupted run, want --max-inflight 3", n)
	}

	// A consumer finishes those three; the rerun resumes with them done.
	startServe(t, url, "--provision=off")
	natstest.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if n := natstest.StreamCount(t, js, "EMBED_RESULTS"); n != 3 {
			return fmt.Errorf("%d results", n)
		}
		return nil
	})
	out := filepath.Join(dir, "out.jsonl")
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	code, _, errOut = runCmd(t, ctx2, "submit", "--nats", url, "--job-size", "4", "--max-inflight", "3", "--json", in, "-o", out)
	if code != 1 || !strings.Contains(errOut, "6 of 45 lines failed") {
		t.Fatalf("resumed submit: exit %d, want 1 and the failed lines counted: %s", code, errOut)
	}
	if !strings.Contains(errOut, "3 of 12 jobs already done") {
		t.Errorf("resume did not report the finished jobs: %s", errOut)
	}
	checkSubmitOutput(t, out, texts)
	// Each job ran once: the resumed run did not submit the finished ones.
	if n := natstest.StreamCount(t, js, "EMBED_RESULTS"); n != 12 {
		t.Errorf("%d results for 12 jobs", n)
	}
	ctx3, cancel3 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel3()
	jc, err := js.Consumer(ctx3, "EMBED_JOBS", "embedder")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := jc.Info(ctx3); err != nil || info.Delivered.Consumer != 12 {
		t.Errorf("consumer delivered %v jobs (%v), want 12", info.Delivered.Consumer, err)
	}

	// A finished run is answered from the results stream alone.
	again := filepath.Join(dir, "again.jsonl")
	code, _, errOut = runCmd(t, ctx2, "submit", "--nats", url, "--job-size", "4", "--json", in, "-o", again)
	if code != 1 || !strings.Contains(errOut, "12 of 12 jobs already done") {
		t.Fatalf("rerun of a finished run: exit %d: %s", code, errOut)
	}
	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(again)
	if string(a) != string(b) {
		t.Error("the rerun wrote a different output")
	}

	// msgpack jobs, another run id, sparse too.
	mp := filepath.Join(dir, "mp.jsonl")
	code, _, errOut = runCmd(t, ctx2, "submit", "--nats", url, "--job-size", "10", "--outputs", "dense,sparse", "--run", "mp", in, "-o", mp)
	if code != 1 {
		t.Fatalf("msgpack submit: exit %d: %s", code, errOut)
	}
	checkSubmitOutput(t, mp, texts)
	// The stored results alone give the same output, without the input.
	stored := filepath.Join(dir, "stored.jsonl")
	code, _, errOut = runCmd(t, ctx2, "results", "--nats", url, "mp", "-o", stored)
	if code != 1 || !strings.Contains(errOut, "6 of 45 lines failed") {
		t.Fatalf("results mp: exit %d: %s", code, errOut)
	}
	if want := "wrote 45 lines (6 failed) of run mp to " + stored + "\n"; !strings.Contains(errOut, want) {
		t.Errorf("results printed no summary %q:\n%s", want, errOut)
	}
	if a, b := readFile(t, mp), readFile(t, stored); a != b {
		t.Errorf("results wrote a different output than submit:\n%s\nwant\n%s", b, a)
	}

	code, stdout, errOut := runCmd(t, ctx2, "submit", "--nats", url, "--text", "hello", "--outputs", "dense,sparse")
	if code != 0 {
		t.Fatalf("submit --text: exit %d: %s", code, errOut)
	}
	checkOutputLines(t, stdout, []string{"1"})
	var line outLine
	if err := json.Unmarshal([]byte(stdout), &line); err != nil || len(line.Dense) == 0 || line.Sparse == nil || !strings.Contains(line.Model, "@") {
		t.Errorf("submit --text printed %q (%v)", stdout, err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
