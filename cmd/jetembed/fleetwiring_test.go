package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/engine/model"
	"github.com/jetembed/jetembed/fleet"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// guarded are serve flags for a CPU fleet whose JIT guard refuses texts of
// 64 tokens or more until a longer shape is warmed (warm-up stops at 32).
var guarded = []string{
	"--guard", "on", "--guard-seq", "64", "--max-tokens", "512",
	"--warmup-batches", "1", "--warmup-seqs", "8,16,32", "--fleet", "on", "--fleet-idle", "300ms",
}

// TestServeFleetHealsRefusedJob runs two serve processes as a fleet: a
// long job the guard refuses is NAKed, wanted, built by an idle member,
// and answered; the fleet command then shows the shape and who built it.
func TestServeFleetHealsRefusedJob(t *testing.T) {
	srv := natstest.RunServer(t)
	a := startServe(t, srv.ClientURL(), guarded...)
	b := startServe(t, srv.ClientURL(), guarded...)
	defer func() {
		if t.Failed() {
			t.Logf("A:\n%s\nB:\n%s", a.log.String(), b.log.String())
		}
	}()

	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc, client.WithRun("fleet"))
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("word ", 98)
	start := time.Now()
	if _, err := c.Submit(context.Background(), schema.NewJob("long", long)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var res *schema.Result
	for sr, err := range c.Results(ctx, "fleet") {
		if err != nil {
			t.Fatal(err)
		}
		res = sr.Result
		break
	}
	if res == nil || res.Error != nil || len(res.Items) != 1 || res.Items[0].Error != nil || len(res.Items[0].Dense) == 0 {
		t.Fatalf("result %+v: want the long text embedded", res)
	}
	t.Logf("the refused job was answered after %v", time.Since(start))
	logs := a.log.String() + b.log.String()
	for _, want := range []string{`"msg":"fleet joined"`, `"msg":"fleet: shape wanted"`, `"msg":"fleet: compiled"`, `"msg":"fleet: pre-warmed a peer's shape"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("no %s line in the members' logs", want)
		}
	}

	code, out, errOut := runCmd(t, ctx, "fleet", "--nats", srv.ClientURL())
	if code != 0 {
		t.Fatalf("fleet: exit %d: %s", code, errOut)
	}
	// Every shape that ran is published: the three start-up shapes and the
	// built one.
	if !strings.Contains(out, "SHAPES (4)") || !strings.Contains(out, " lock ") || !strings.Contains(out, "1x32 ") ||
		!strings.Contains(out, "WANTS (0)") || !strings.Contains(out, "LOCKS (0)") {
		t.Errorf("fleet table: want the start-up shapes and the built one, no wants or locks:\n%s", out)
	}
}

// TestServeTakesPeerProbe checks that a member finds the cost coefficients
// a peer with the same model, SM and hardware stored, and skips its probe.
func TestServeTakesPeerProbe(t *testing.T) {
	srv := natstest.RunServer(t)
	dir := tinyModel(t, "tiny-hidden")
	m, err := model.Open(dir, model.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	fs := newFlagSet("probe-test", stdio{out: io.Discard, err: io.Discard})
	ef := addEngineFlags(fs, true)
	if err := fs.Parse([]string{"--threads", "1"}); err != nil {
		t.Fatal(err)
	}
	ec, err := ef.config()
	if err != nil {
		t.Fatal(err)
	}
	arch := ec.Provider.Hardware(context.Background())
	if !strings.HasPrefix(arch, "cpu-") || !strings.HasSuffix(arch, "-t1") {
		t.Fatalf("hardware = %q, want cpu-<arch>-<model>-t1", arch)
	}

	if code, _, errOut := runCmd(t, context.Background(), "provision", "--nats", srv.ClientURL()); code != 0 {
		t.Fatalf("provision: %s", errOut)
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := natsjs.New(nc)
	kv, err := jetstream.OpenKVStore(context.Background(), js, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := fleet.StoreProbe(context.Background(), kv, m.ID, "cpu", arch, "peer/1", 3e-9, 4e-12); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, srv.ClientURL(), "--probe", "--fleet", "on")
	if got := logValue(s.log.String(), "fleet: cost model from a peer's probe", "by"); got != "peer/1" {
		t.Errorf("serve did not take the peer's coefficients (by %q):\n%s", got, s.log.String())
	}
	if strings.Contains(s.log.String(), "fleet: probed the cost model") {
		t.Error("serve probed although a peer's coefficients were in the bucket")
	}
}

// TestServeFleetAutoIsOffOnCPU: on the CPU provider serve does not join
// the fleet by default (there are no engines to share): nothing it ran
// reaches the engines bucket, no member key, no pre-warm of peers'
// shapes. --fleet takes auto, on or off only.
func TestServeFleetAutoIsOffOnCPU(t *testing.T) {
	srv := natstest.RunServer(t)
	s := startServe(t, srv.ClientURL(), "--warmup-batches", "1", "--warmup-seqs", "8,16")
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc, client.WithRun("cpu"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(context.Background(), schema.NewJob("j", "a few words")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, err := range c.Results(ctx, "cpu") {
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	js, _ := natsjs.New(nc)
	kv, err := js.KeyValue(ctx, "EMBED_ENGINES")
	if err != nil {
		t.Fatal(err)
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	if len(keys) != 0 || strings.Contains(s.log.String(), "fleet joined") {
		t.Errorf("a CPU serve with --fleet auto wrote %v to the engines bucket (or joined):\n%s", keys, s.log.String())
	}
	if code, _, _ := runCmd(t, ctx, "serve", "--nats", srv.ClientURL(), "--fleet", "maybe", "--model", tinyModel(t, "tiny-hidden")); code != 2 {
		t.Errorf("--fleet maybe: exit %d, want 2", code)
	}
}
