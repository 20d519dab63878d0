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

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/schema"
)

// submitRig is a provisioned server with a producer connection.
type submitRig struct {
	url string
	nc  *nats.Conn
	js  natsjs.JetStream
}

func newSubmitRig(t *testing.T) *submitRig {
	t.Helper()
	srv := natstest.RunServer(t)
	url := srv.ClientURL()
	if code, _, errOut := runCmd(t, context.Background(), "provision", "--nats", url); code != 0 {
		t.Fatal(errOut)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &submitRig{url: url, nc: nc, js: js}
}

func (r *submitRig) msgs(t *testing.T, stream string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := r.js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// storeResult stores data as the result of job id of run, as the consumer
// would (Nats-Msg-Id derived from the reply subject and job id).
func (r *submitRig) storeResult(t *testing.T, run, id string, data []byte) {
	t.Helper()
	c, err := client.New(r.nc, client.WithRun(run))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h := nats.Header{schema.HeaderMsgID: {schema.ResultMsgID(c.Run(), c.ReplySubject(id), id)}, schema.HeaderJobID: {id},
		schema.HeaderContentType: {schema.EncodingMsgpack.ContentType()}}
	if _, err := r.js.PublishMsg(ctx, &nats.Msg{Subject: c.ReplySubject(id), Header: h, Data: data}); err != nil {
		t.Fatal(err)
	}
}

// writeLines writes n input lines "text i" and returns the file.
func writeLines(t *testing.T, n int) string {
	t.Helper()
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"id":"l%d","text":"text %d"}`+"\n", i, i)
	}
	p := filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func readOutput(t *testing.T, path string) []outLine {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []outLine
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		var l outLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("output line %q: %v", line, err)
		}
		out = append(out, l)
	}
	return out
}

// TestSubmitBadStoredResult stores an undecodable result under a job's id
// while the job waits in the queue, so the consumer's real result is
// dropped by the duplicate window: submit must answer that job's lines with
// an internal error and finish, live and on a resume.
func TestSubmitBadStoredResult(t *testing.T) {
	r := newSubmitRig(t)
	in := writeLines(t, 6)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type exit struct {
		code   int
		errOut string
	}
	done := make(chan exit, 1)
	go func() {
		code, _, errOut := runCmd(t, ctx, "submit", "--nats", r.url, "--run", "bad", "--job-size", "2", in, "-o", out)
		done <- exit{code, errOut}
	}()
	natstest.CheckFor(t, 20*time.Second, 10*time.Millisecond, func() error {
		if n := r.msgs(t, "EMBED_JOBS"); n != 3 {
			return fmt.Errorf("%d jobs queued", n)
		}
		return nil
	})
	r.storeResult(t, "bad", "bad-1", []byte("\xc1 not a result"))
	startServe(t, r.url, "--provision=off")
	var e exit
	select {
	case e = <-done:
	case <-ctx.Done():
		t.Fatal("submit waits forever for a job whose stored result does not decode")
	}
	if e.code != 1 || !strings.Contains(e.errOut, "2 of 6 lines failed") {
		t.Fatalf("submit: exit %d, want 1 with 2 failed lines: %s", e.code, e.errOut)
	}
	check := func(lines []outLine) {
		t.Helper()
		if len(lines) != 6 {
			t.Fatalf("%d output lines, want 6", len(lines))
		}
		for i, l := range lines {
			bad := i == 2 || i == 3
			switch {
			case l.ID != fmt.Sprint("l", i):
				t.Errorf("line %d: id %q", i, l.ID)
			case bad && (l.Error == nil || l.Error.Code != schema.CodeInternal || l.Dense != nil):
				t.Errorf("line %d of the job with a bad result: %+v, want an internal error", i, l)
			case !bad && (l.Error != nil || len(l.Dense) == 0):
				t.Errorf("line %d: %+v, want a vector", i, l)
			}
		}
	}
	check(readOutput(t, out))
	// Three results stored: the bad one and two real ones (the real one of
	// bad-1 was a duplicate).
	if n := r.msgs(t, "EMBED_RESULTS"); n != 3 {
		t.Errorf("%d results stored, want 3", n)
	}

	// A resume reads the same bad result back and does the same.
	again := filepath.Join(t.TempDir(), "again.jsonl")
	code, _, errOut := runCmd(t, ctx, "submit", "--nats", r.url, "--run", "bad", "--job-size", "2", in, "-o", again)
	if code != 1 || !strings.Contains(errOut, "3 of 3 jobs already done") {
		t.Fatalf("resume: exit %d: %s", code, errOut)
	}
	check(readOutput(t, again))
}

// TestSubmitWindowAndOrder stores results for jobs 1..20 of a 30-job run
// before it starts, not for job 0: the run writes nothing until job 0 is
// answered, submits job 0 only (jobs past the window of 8 x --max-inflight
// wait for the head even though an in-flight slot is free), and then
// writes all lines in input order, the stored ones from its spool.
func TestSubmitWindowAndOrder(t *testing.T) {
	r := newSubmitRig(t)
	const jobs, size = 30, 2
	in := writeLines(t, jobs*size)
	for k := 1; k <= 20; k++ {
		res := &schema.Result{V: schema.Version, ID: fmt.Sprint("win-", k), Model: "stored"}
		for i := range size {
			res.Items = append(res.Items, schema.Item{Dense: schema.Vector{float32(k*size + i)}, Tokens: 1})
		}
		data, err := schema.EncodeResult(res, schema.EncodingMsgpack)
		if err != nil {
			t.Fatal(err)
		}
		r.storeResult(t, "win", res.ID, data)
	}
	out := filepath.Join(t.TempDir(), "out.jsonl")
	args := []string{"submit", "--nats", r.url, "--run", "win", "--job-size", fmt.Sprint(size), "--max-inflight", "2", in, "-o", out}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan int, 1)
	var errOut string
	go func() {
		var code int
		code, _, errOut = runCmd(t, ctx, args...)
		done <- code
	}()
	natstest.CheckFor(t, 20*time.Second, 10*time.Millisecond, func() error {
		if n := r.msgs(t, "EMBED_JOBS"); n != 1 {
			return fmt.Errorf("%d jobs queued", n)
		}
		return nil
	})
	// Give it the time to (wrongly) submit job 21 with its free slot: the
	// window must hold it back.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if n := r.msgs(t, "EMBED_JOBS"); n != 1 {
			t.Fatalf("%d jobs queued: a job past the window was submitted while the head job waited", n)
		}
	}
	if data, _ := os.ReadFile(out); len(data) != 0 {
		t.Fatalf("lines written before the head job was answered: %s", data)
	}

	startServe(t, r.url, "--provision=off")
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("submit: exit %d: %s", code, errOut)
		}
	case <-ctx.Done():
		t.Fatal("submit did not finish")
	}
	lines := readOutput(t, out)
	if len(lines) != jobs*size {
		t.Fatalf("%d output lines, want %d", len(lines), jobs*size)
	}
	for i, l := range lines {
		k := i / size
		stored := k >= 1 && k <= 20
		switch {
		case l.ID != fmt.Sprint("l", i) || l.Error != nil:
			t.Errorf("line %d: %+v", i, l)
		case stored && (len(l.Dense) != 1 || l.Dense[0] != float32(i)):
			t.Errorf("line %d: dense %v, want the stored [%d]", i, l.Dense, i)
		case !stored && len(l.Dense) < 2:
			t.Errorf("line %d: dense %v, want a vector from the engine", i, l.Dense)
		}
	}
	// Jobs 0 and 21..29 ran; the stored ones were not submitted again.
	if n := r.msgs(t, "EMBED_RESULTS"); n != 30 {
		t.Errorf("%d results stored, want 30", n)
	}

	// The same run from stdin (read once, streaming) is answered from the
	// results stream alone, line for line.
	input, err := os.ReadFile(in)
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := run(t, string(input), "submit", "--nats", r.url, "--run", "win", "--job-size", fmt.Sprint(size), "--max-inflight", "2", "-")
	if code != 0 || !strings.Contains(stderr, "30 jobs already done") {
		t.Fatalf("submit from stdin: exit %d: %s", code, stderr)
	}
	if first, _ := os.ReadFile(out); stdout != string(first) {
		t.Error("submit from stdin wrote another output than from the file")
	}
}
