package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/internal/natstest"
)

// After `provision --replicas 3 --ack-wait 5m --max-ack-pending 4096` on a
// 3-node cluster, two serve processes with default flags leave every
// stream, the bucket and the consumer as provisioned (they used to reset
// them to R1, 1m and 1024), and say what differs from their flags.
func TestServeNeverReconfiguresTheServer(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := natstest.RunCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code, out, errOut := runCmd(t, ctx, "provision", "--nats", c.URLs(), "--replicas", "3", "--ack-wait", "5m", "--max-ack-pending", "4096")
	if code != 0 {
		t.Fatalf("provision: exit %d: %s%s", code, out, errOut)
	}
	a := startServe(t, c.URLs(), "--provision=off")
	b := startServe(t, c.URLs())
	for _, s := range []*served{a, b} {
		logs := s.log.String()
		if !strings.Contains(logs, "server config differs from the flags") || !strings.Contains(logs, "Replicas") {
			t.Errorf("serve did not warn about the replicas it would have set:\n%s", logs)
		}
		if got := logValue(logs, "consumer settings from the server", "ack_wait"); got != "5m0s" {
			t.Errorf("serve runs with ack wait %q, want the server's 5m0s", got)
		}
	}
	nc, err := nats.Connect(c.URLs())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := natsjs.New(nc)
	for _, name := range []string{"EMBED_JOBS", "EMBED_RESULTS", "EMBED_DLQ", "KV_EMBED_ENGINES"} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if n := s.CachedInfo().Config.Replicas; n != 3 {
			t.Errorf("%s: replicas %d after two serves started, want 3", name, n)
		}
	}
	jc, err := js.Consumer(ctx, "EMBED_JOBS", "embedder")
	if err != nil {
		t.Fatal(err)
	}
	if cc := jc.CachedInfo().Config; cc.AckWait != 5*time.Minute || cc.MaxAckPending != 4096 {
		t.Errorf("consumer after two serves: AckWait %v MaxAckPending %d, want 5m 4096", cc.AckWait, cc.MaxAckPending)
	}
}

// serve --provision=off on a server without the objects exits with a
// config error (78) that names each missing object and how to create it.
func TestServeProvisionOffNamesMissingObjects(t *testing.T) {
	srv := natstest.RunServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, _, errOut := runCmd(t, ctx, "serve", "--nats", srv.ClientURL(), "--model", tinyModel(t, "tiny-hidden"),
		"--threads", "1", "--warmup-batches", "", "--probe=false", "--http", "", "--provision=off")
	if code != 78 {
		t.Fatalf("exit %d, want 78: %s", code, errOut)
	}
	for _, want := range []string{"stream EMBED_JOBS", "stream EMBED_RESULTS", "consumer EMBED_JOBS/embedder", "kv EMBED_ENGINES", "jetembed provision", "--provision=create"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("error does not say %q:\n%s", want, errOut)
		}
	}
	// The old default is refused with the migration advice.
	code, _, errOut = runCmd(t, ctx, "serve", "--nats", srv.ClientURL(), "--provision=true")
	if code != 2 || !strings.Contains(errOut, "jetembed provision") {
		t.Errorf("--provision=true: exit %d: %s", code, errOut)
	}
}
