package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/internal/natstest"
)

// TestTenantBlocksShipped: the tenants of deploy/nats/accounts.conf are
// exactly what `tenant add` prints for them, so the shipped file is the
// documentation of what the command makes.
func TestTenantBlocksShipped(t *testing.T) {
	conf, err := os.ReadFile(accountsConf)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"producer-a", "producer-b", "gateway"} {
		ctx := context.Background()
		code, out, errOut := runCmd(t, ctx, "tenant", "add", name)
		if code != 0 {
			t.Fatalf("tenant add %s: exit %d: %s", name, code, errOut)
		}
		if !strings.Contains(string(conf), out) {
			t.Errorf("accounts.conf has not the block of `tenant add %s`:\n%s", name, out)
		}
	}
}

func TestTenantAddRefuses(t *testing.T) {
	ctx := context.Background()
	for _, args := range [][]string{
		{"tenant"}, {"tenant", "remove", "x"}, {"tenant", "add"}, {"tenant", "add", "a.b"}, {"tenant", "add", "Acme"},
		{"tenant", "add", "acme", "more"}, {"tenant", "add", "a*"}, {"tenant", "add", "_x"}, {"tenant", "add", "x y"},
		{"tenant", "add", strings.Repeat("a", 64)}, {"tenant", "add", "acme", "--results-consumers", "0"},
		{"tenant", "add", "acme", "--fleet-account", "A.B"},
	} {
		if code, _, errOut := runCmd(t, ctx, args...); code == 0 || errOut == "" {
			t.Errorf("%v: exit %d, %q", args, code, errOut)
		}
	}
	// --write makes its directory (tenants/ beside accounts.conf) and
	// never overwrites a block.
	file := filepath.Join(t.TempDir(), "tenants", "acme.conf")
	if code, _, errOut := runCmd(t, ctx, "tenant", "add", "acme", "--write", file); code != 0 {
		t.Fatalf("--write: exit %d: %s", code, errOut)
	}
	if code, _, _ := runCmd(t, ctx, "tenant", "add", "acme", "--write", file); code == 0 {
		t.Error("--write over an existing file succeeded")
	}
	code, out, _ := runCmd(t, ctx, "tenant", "add", "acme", "--jwt")
	if code != 0 || !strings.Contains(out, "nsc add account --name acme") || !strings.Contains(out, `"\$JS.FC.EMBED_RESULTS.>"`) ||
		!strings.Contains(out, "--account-token-position 9") || !strings.Contains(out, "tenants.tsv") {
		t.Errorf("--jwt: exit %d:\n%s", code, out)
	}
}

// TestTenantAddConfigMode: a tenant added with `tenant add --write`,
// included in the shipped accounts.conf and given its password, and
// nothing else changed (not the fleet's account, not the embedder, not
// serve), submits a job with `jetembed submit --tenant` and reads its
// result back with `jetembed results`, through a real nats-server and a
// real serve.
func TestTenantAddConfigMode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	dir := t.TempDir()
	if code, _, errOut := runCmd(t, ctx, "tenant", "add", "acme", "--write", filepath.Join(dir, "acme.conf")); code != 0 {
		t.Fatalf("tenant add: exit %d: %s", code, errOut)
	}
	shipped, err := os.ReadFile(accountsConf)
	if err != nil {
		t.Fatal(err)
	}
	// The block goes inside the accounts block, beside the others.
	conf := strings.Replace(string(shipped), "\n  SYS: {\n", "\n  include ./acme.conf\n\n  SYS: {\n", 1)
	if conf == string(shipped) {
		t.Fatal("accounts.conf has no SYS account to add the tenant before")
	}
	if err := os.WriteFile(filepath.Join(dir, "accounts.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`\$([A-Z][A-Z0-9_]*)_PASSWORD\b`).FindAllStringSubmatch(conf, -1) {
		t.Setenv(m[1]+"_PASSWORD", opsPassword(strings.ToLower(strings.ReplaceAll(m[1], "_", "-"))))
	}
	t.Setenv("ACME_PASSWORD", opsPassword("acme"))
	caFile, certFile, keyFile := natstest.WriteTLS(t, dir)
	cfg := "host: 127.0.0.1\nport: -1\nmax_payload: " + strconv.Itoa(tenancyMaxPayload) + "\n" +
		"tls {\n  cert_file: \"" + certFile + "\"\n  key_file: \"" + keyFile + "\"\n  timeout: 2\n}\n" +
		"jetstream { store_dir: \"" + filepath.Join(dir, "js") + "\" }\n" +
		"include ./accounts.conf\n"
	cfgFile := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(cfgFile)
	if err != nil {
		t.Fatalf("the server does not take the tenant's block: %v", err)
	}
	opts.NoLog, opts.NoSigs = true, true
	s := natstest.RunServerWithOptions(t, opts)
	r := &tenancyRig{url: strings.Replace(s.ClientURL(), "nats://", "tls://", 1), caFile: caFile}
	if code, out, errOut := runCmd(t, ctx, append([]string{"provision"}, r.as(t, "provisioner")...)...); code != 0 {
		t.Fatalf("provision: exit %d: %s%s", code, out, errOut)
	}
	r.s = startOps(t, r.url, append(r.as(t, "embedder"), "--provision=off", "--http", "")...)
	r.s.waitReady(t)

	// A request (the service import of its endpoint: submit --text) and
	// queued jobs (the jobs import and its PubAcks, the results read back
	// through its results consumer), each as the tools run it.
	code, stdout, errOut := r.cli(t, ctx, "acme", "submit", "--text", "a request of acme")
	if code != 0 {
		t.Fatalf("submit --text as acme: exit %d: %s", code, errOut)
	}
	var one outLine
	if err := json.Unmarshal([]byte(strings.TrimSpace(stdout)), &one); err != nil || len(one.Dense) == 0 {
		t.Fatalf("submit --text as acme printed %.300s (%v)", stdout, err)
	}
	in := filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(in, []byte(`{"id":"j1","text":"a job of acme"}`+"\n"+`{"id":"j2","text":"another"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out.jsonl")
	if code, _, errOut = r.cli(t, ctx, "acme", "submit", "--run", "arun", in, "-o", out); code != 0 {
		t.Fatalf("submit as acme: exit %d: %s", code, errOut)
	}
	if lines := readOutput(t, out); len(lines) != 2 || lines[0].ID != "j1" || len(lines[0].Dense) != len(one.Dense) {
		t.Fatalf("submit as acme wrote %+v", lines)
	}
	back := filepath.Join(t.TempDir(), "back.jsonl")
	if code, _, errOut = r.cli(t, ctx, "acme", "results", "arun", "-o", back); code != 0 {
		t.Fatalf("results as acme: exit %d: %s", code, errOut)
	}
	if lines := readOutput(t, back); len(lines) != 2 || len(lines[1].Dense) != len(one.Dense) {
		t.Errorf("results as acme: %+v", lines)
	}
	// Stored in the fleet's account under acme's own token.
	nc, err := nats.Connect(r.url, nats.RootCAs(r.caFile), nats.UserInfo("provisioner", opsPassword("provisioner")))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if r.pjs, err = natsjs.New(nc); err != nil {
		t.Fatal(err)
	}
	// (submit packs lines into jobs: one job here.)
	if got := r.stored(t, ctx, "embed.results.acme.arun.>"); len(got) == 0 {
		t.Errorf("stored under embed.results.acme: %v", got)
	}
	if l := strings.ToLower(errOut + r.s.log.String()); strings.Contains(l, "permission") || strings.Contains(l, "violation") || strings.Contains(l, "bad_reply") {
		t.Errorf("a refusal on the way:\n%s", l)
	}
}
