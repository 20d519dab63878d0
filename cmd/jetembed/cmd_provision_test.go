package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/internal/natstest"
)

func runCmd(t *testing.T, ctx context.Context, args ...string) (code int, out, errOut string) {
	t.Helper()
	var o, e bytes.Buffer
	code = runMain(ctx, args, stdio{in: strings.NewReader(""), out: &o, err: &e})
	return code, o.String(), e.String()
}

func TestProvisionCommand(t *testing.T) {
	s := natstest.RunServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	code, out, errOut := runCmd(t, ctx, "provision", "--nats", s.ClientURL(), "--max-ack-pending", "64", "--ack-wait", "30s")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if n := strings.Count(out, " created"); n != 8 {
		t.Errorf("%d objects created, want 8 (three streams, the usage stream, the consumer, three buckets):\n%s", n, out)
	}

	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := natsjs.New(nc)
	c, err := js.Consumer(ctx, "EMBED_JOBS", "embedder")
	if err != nil {
		t.Fatal(err)
	}
	cc := c.CachedInfo().Config
	if cc.MaxAckPending != 64 || cc.AckWait != 30*time.Second || len(cc.BackOff) != 4 || cc.BackOff[0] != 30*time.Second {
		t.Errorf("consumer: MaxAckPending %d AckWait %v BackOff %v", cc.MaxAckPending, cc.AckWait, cc.BackOff)
	}

	code, out, errOut = runCmd(t, ctx, "provision", "--nats", s.ClientURL(), "--max-ack-pending", "64", "--ack-wait", "30s")
	if code != 0 || strings.Count(out, " unchanged") != 8 {
		t.Fatalf("re-run: exit %d, %s\n%s", code, errOut, out)
	}

	code, out, errOut = runCmd(t, ctx, "provision", "--nats", s.ClientURL(), "--max-ack-pending", "128", "--ack-wait", "30s")
	if code != 0 || !strings.Contains(out, "updated MaxAckPending 64 -> 128") {
		t.Fatalf("update: exit %d, %s\n%s", code, errOut, out)
	}
}

func TestProvisionCommandRefusedDrift(t *testing.T) {
	s := natstest.RunServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := natsjs.New(nc)
	if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "EMBED_JOBS", Subjects: []string{"embed.jobs.>"}}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd(t, ctx, "provision", "--nats", s.ClientURL())
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "refused Retention Limits -> WorkQueue") {
		t.Errorf("report does not show the refusal:\n%s", out)
	}
	if !strings.Contains(errOut, "stream EMBED_JOBS") || !strings.Contains(errOut, "Retention") {
		t.Errorf("error does not name the stream and field: %s", errOut)
	}
}

func TestProvisionCommandErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	port := natstest.FreePort(t)
	code, _, errOut := runCmd(t, ctx, "provision", "--nats", fmt.Sprintf("127.0.0.1:%d", port))
	if code != 1 || !strings.Contains(errOut, fmt.Sprintf("no nats server at nats://127.0.0.1:%d: connection refused", port)) {
		t.Errorf("wrong port: exit %d, %s", code, errOut)
	}
	for _, args := range [][]string{
		{"provision", "--replicas", "0"},
		{"provision", "--ack-wait", "10s", "--backoff", "20s,40s"},
		{"provision", "--backoff", "soon"},
		{"provision", "extra"},
	} {
		if code, _, errOut := runCmd(t, ctx, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage): %s", args, code, errOut)
		}
	}
}

func TestProvisionCommandEnv(t *testing.T) {
	s := natstest.RunServer(t)
	t.Setenv("JETEMBED_NATS", s.ClientURL())
	t.Setenv("JETEMBED_JOBS_STREAM", "JOBS_FROM_ENV")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code, out, errOut := runCmd(t, ctx, "provision")
	if code != 0 || !strings.Contains(out, "JOBS_FROM_ENV") || !strings.Contains(out, s.ClientURL()) {
		t.Fatalf("exit %d, %s\n%s", code, errOut, out)
	}
}

func TestProvisionCommandDryRunAndDowngrade(t *testing.T) {
	s := natstest.RunServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code, out, errOut := runCmd(t, ctx, "provision", "--nats", s.ClientURL(), "--dry-run")
	if code != 0 || strings.Count(out, "would be created") != 8 || !strings.Contains(out, "nothing changed") {
		t.Fatalf("dry run: exit %d: %s\n%s", code, errOut, out)
	}
	if code, _, errOut := runCmd(t, ctx, "serve", "--nats", s.ClientURL(), "--model", tinyModel(t, "tiny-hidden"), "--http", ""); code != 78 {
		t.Fatalf("after a dry run serve found the objects: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runCmd(t, ctx, "provision", "--nats", s.ClientURL()); code != 0 {
		t.Fatalf("provision: exit %d: %s", code, errOut)
	}
	// Dropping the advisory subject of the DLQ is a downgrade.
	code, out, errOut = runCmd(t, ctx, "provision", "--nats", s.ClientURL(), "--no-dlq-advisories")
	if code != 1 || !strings.Contains(errOut, "refused downgrade") || !strings.Contains(out, "--allow-downgrade") {
		t.Fatalf("downgrade: exit %d: %s\n%s", code, errOut, out)
	}
	code, out, errOut = runCmd(t, ctx, "provision", "--nats", s.ClientURL(), "--no-dlq-advisories", "--allow-downgrade")
	if code != 0 || !strings.Contains(out, "EMBED_DLQ                updated Subjects") {
		t.Fatalf("allowed downgrade: exit %d: %s\n%s", code, errOut, out)
	}
}

// TestProvisionCommandStreamCaps is part of reproduction 4 of issue 21: the
// results and dead-letter streams were created with max_bytes -1, so
// producers could fill the servers' storage through them. provision now
// caps both by default (4 GiB, 1 GiB), the jobs stream and the blobs
// bucket too (1 GiB, 2 GiB), updates a deployment made without caps, and
// takes --results-max-bytes / --dlq-max-bytes.
func TestProvisionCommandStreamCaps(t *testing.T) {
	s := natstest.RunServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nc := natstest.Connect(t, s.ClientURL())
	js, _ := natsjs.New(nc)
	caps := func() (results, dlq int64) {
		t.Helper()
		for _, st := range []struct {
			name string
			to   *int64
		}{{"EMBED_RESULTS", &results}, {"EMBED_DLQ", &dlq}} {
			info, err := js.Stream(ctx, st.name)
			if err != nil {
				t.Fatal(err)
			}
			*st.to = info.CachedInfo().Config.MaxBytes
		}
		return results, dlq
	}
	// A deployment provisioned before the caps.
	if code, _, errOut := runCmd(t, ctx, "provision", "--nats", s.ClientURL(), "--results-max-bytes", "-1", "--dlq-max-bytes", "-1"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if r, d := caps(); r != -1 || d != -1 {
		t.Fatalf("uncapped: %d, %d", r, d)
	}
	code, out, errOut := runCmd(t, ctx, "provision", "--nats", s.ClientURL())
	if code != 0 || !strings.Contains(out, "MaxBytes -1 -> 4294967296") || !strings.Contains(out, "MaxBytes -1 -> 1073741824") {
		t.Fatalf("default caps: exit %d, %s\n%s", code, errOut, out)
	}
	if r, d := caps(); r != 4<<30 || d != 1<<30 {
		t.Errorf("default caps: results %d, dlq %d", r, d)
	}
	// The queue and the blobs are capped too (the attack review's
	// finding 7): 1 GiB and 2 GiB.
	for stream, want := range map[string]int64{"EMBED_JOBS": 1 << 30, "OBJ_EMBED_BLOBS": 2 << 30} {
		info, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		if got := info.CachedInfo().Config.MaxBytes; got != want {
			t.Errorf("%s max bytes %d at defaults, want %d", stream, got, want)
		}
	}
	if code, _, errOut := runCmd(t, ctx, "provision", "--nats", s.ClientURL(), "--results-max-bytes", "1048576", "--dlq-max-bytes", "524288"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if r, d := caps(); r != 1<<20 || d != 512<<10 {
		t.Errorf("flag caps: results %d, dlq %d", r, d)
	}
	if code, _, errOut := runCmd(t, ctx, "provision", "--dlq-max-bytes", "-7"); code != 2 {
		t.Errorf("--dlq-max-bytes -7: exit %d, want 2: %s", code, errOut)
	}
}
