package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/schema"
)

// TestTenantAddJWTMode: the account layout `tenant add --jwt` prints as
// nsc commands works in a real nats-server in operator mode, without nsc
// (which cannot be installed here): the test signs what the commands are
// printed from (fleetExports, newTenantAccount of the tenant's public key),
// loads it into a memory resolver, and runs provision as the provisioner,
// serve as the embedder (both users with their permissions of
// deploy/nats/accounts.conf, in the fleet's account) and the tenant's
// tools with its creds and --tenant <its key>. The fleet sees the tenant
// by its key: its results are stored and its usage counted under it.
func TestTenantAddJWTMode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	operator, _ := nkeys.CreateOperator()
	operatorPub, _ := operator.PublicKey()
	opClaims := jwt.NewOperatorClaims(operatorPub)
	resolver := &server.MemAccResolver{}
	account := func(name string, edit func(*jwt.AccountClaims)) (nkeys.KeyPair, string) {
		t.Helper()
		kp, _ := nkeys.CreateAccount()
		pub, _ := kp.PublicKey()
		ac := jwt.NewAccountClaims(pub)
		ac.Name = name
		if edit != nil {
			edit(ac)
		}
		var vr jwt.ValidationResults
		ac.Validate(&vr)
		if vr.IsBlocking(true) {
			t.Fatalf("account %s: %v", name, vr.Errors())
		}
		token, err := ac.Encode(operator)
		if err != nil {
			t.Fatal(err)
		}
		if err := resolver.Store(pub, token); err != nil {
			t.Fatal(err)
		}
		return kp, pub
	}
	_, sysPub := account("SYS", nil)
	fleet, fleetPub := account(DefaultFleetAccount, func(ac *jwt.AccountClaims) {
		ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		for _, e := range fleetExports {
			x := &jwt.Export{Subject: jwt.Subject(e.subject), Type: jwt.Stream, AccountTokenPosition: uint(e.position)}
			if e.service {
				x.Type = jwt.Service
			}
			if e.stream {
				x.ResponseType = jwt.ResponseTypeStream
			}
			if e.threshold != "" {
				d, err := time.ParseDuration(e.threshold)
				if err != nil {
					t.Fatal(err)
				}
				x.ResponseThreshold = d
			}
			ac.Exports.Add(x)
		}
	})
	// A tenant's imports are made of its key, as the nsc commands make
	// them of $TENANT_KEY; mallory's of acme's key.
	imports := func(key string) func(*jwt.AccountClaims) {
		return func(ac *jwt.AccountClaims) {
			for i, im := range newTenantAccount(key, schema.DefaultResultsConsumers).imports {
				x := &jwt.Import{Name: fmt.Sprintf("i%d", i), Account: fleetPub, Subject: jwt.Subject(im.remote),
					LocalSubject: jwt.RenamingSubject(im.local), Type: jwt.Stream}
				if im.service {
					x.Type = jwt.Service
				}
				ac.Imports.Add(x)
			}
		}
	}
	tenantKP, key := account("acme", func(ac *jwt.AccountClaims) { imports(ac.Subject)(ac) })
	layout := newTenantAccount(key, schema.DefaultResultsConsumers)
	mallory, _ := account("mallory", imports(key))

	// Users: the fleet's with their permissions of accounts.conf, the
	// tenant's with the allow lists the nsc commands give it.
	fleetPerms := accountsConfPermissions(t)
	creds := func(acct nkeys.KeyPair, name string, perms jwt.Permissions) string {
		t.Helper()
		u, _ := nkeys.CreateUser()
		pub, _ := u.PublicKey()
		seed, _ := u.Seed()
		uc := jwt.NewUserClaims(pub)
		uc.Name, uc.Permissions = name, perms
		token, err := uc.Encode(acct)
		if err != nil {
			t.Fatal(err)
		}
		b, err := jwt.FormatUserConfig(token, seed)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name+".creds")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	embedder := creds(fleet, "embedder", fleetPerms["embedder"])
	provisioner := creds(fleet, "provisioner", fleetPerms["provisioner"])
	var tp jwt.Permissions
	tp.Pub.Allow, tp.Sub.Allow = layout.allowPub, layout.allowSub
	tenant := creds(tenantKP, "acme", tp)
	malloryCreds := creds(mallory, "mallory", jwt.Permissions{})

	s := natstest.RunServer(t, func(o *server.Options) {
		o.TrustedOperators = []*jwt.OperatorClaims{opClaims}
		o.AccountResolver = resolver
		o.SystemAccount = sysPub
	})
	url := s.ClientURL()
	t.Setenv("JETEMBED_TENANT", "")
	if code, out, errOut := runCmd(t, ctx, "provision", "--nats", url, "--nats-creds", provisioner); code != 0 {
		t.Fatalf("provision as provisioner: exit %d: %s%s", code, out, errOut)
	}
	// The key -> name table the commands append to (their own line, run
	// by sh): serve labels the tenant's metrics by name through it (and
	// takes its weights and quotas by name: TestServeTenantNames).
	var record string
	for _, line := range strings.Split(tenantNscCommands("acme", DefaultFleetAccount, schema.DefaultResultsConsumers), "\n") {
		if strings.HasSuffix(line, ">> tenants.tsv") {
			record = line
		}
	}
	sh := exec.CommandContext(ctx, "sh", "-c", record)
	sh.Dir, sh.Env = dir, append(os.Environ(), "TENANT_KEY="+key)
	if b, err := sh.CombinedOutput(); err != nil || record == "" {
		t.Fatalf("%q: %v %s", record, err, b)
	}
	srv := startOps(t, url, "--nats-creds", embedder, "--provision=off", "--tenant-names", filepath.Join(dir, "tenants.tsv"))
	srv.waitReady(t)
	metricsAddr := srv.logField(t, "http listening", "addr")
	asTenant := func(args ...string) (int, string, string) {
		t.Helper()
		return runCmd(t, ctx, append(append([]string{args[0]}, "--nats", url, "--nats-creds", tenant, "--tenant", key), args[1:]...)...)
	}

	// A request through the service import of embed.v1.embed.<key>.
	code, stdout, errOut := asTenant("submit", "--text", "a request of acme")
	if code != 0 {
		t.Fatalf("submit --text as the tenant: exit %d: %s", code, errOut)
	}
	var one outLine
	if err := json.Unmarshal([]byte(strings.TrimSpace(stdout)), &one); err != nil || len(one.Dense) == 0 {
		t.Fatalf("submit --text printed %.300s (%v)", stdout, err)
	}
	// Jobs on embed.jobs.<key>.<run> (their PubAcks come back through the
	// import), and their results read live and again from the store
	// through a results consumer <key>_r0.
	in := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(in, []byte(`{"id":"j1","text":"a job of acme"}`+"\n"+`{"id":"j2","text":"another"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.jsonl")
	if code, _, errOut = asTenant("submit", "--run", "arun", in, "-o", out); code != 0 {
		t.Fatalf("submit as the tenant: exit %d: %s", code, errOut)
	}
	if lines := readOutput(t, out); len(lines) != 2 || lines[0].ID != "j1" || len(lines[0].Dense) != len(one.Dense) {
		t.Fatalf("submit as the tenant wrote %+v", lines)
	}
	back := filepath.Join(dir, "back.jsonl")
	if code, _, errOut = asTenant("results", "arun", "-o", back); code != 0 {
		t.Fatalf("results as the tenant: exit %d: %s", code, errOut)
	}
	if lines := readOutput(t, back); len(lines) != 2 || len(lines[1].Dense) != len(one.Dense) {
		t.Errorf("results as the tenant: %+v", lines)
	}

	// The fleet names the tenant by its key: results stored under it, and
	// its usage.
	nc, err := nats.Connect(url, nats.UserCredentials(provisioner))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, schema.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, natsjs.WithSubjectFilter(schema.DefaultTenantResultsPrefix+"."+key+".arun.>"))
	if err != nil || len(info.State.Subjects) == 0 {
		t.Errorf("nothing stored under %s.%s.arun: %v", schema.DefaultTenantResultsPrefix, key, err)
	}
	natstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		code, out, errOut := runCmd(t, ctx, "usage", "--nats", url, "--nats-creds", provisioner, "--json", "--total")
		if code != 0 {
			return fmt.Errorf("usage: exit %d: %s", code, errOut)
		}
		var row struct {
			Tenant string `json:"tenant"`
			Jobs   int64  `json:"jobs"`
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &row); err != nil || row.Tenant != key || row.Jobs < 2 {
			return fmt.Errorf("usage: %q (%v), want the jobs of %s", out, err, key)
		}
		return nil
	})
	// The key -> name table names it in the usage report.
	code, stdout, errOut = runCmd(t, ctx, "usage", "--nats", url, "--nats-creds", provisioner, "--total",
		"--tenant-names", filepath.Join(dir, "tenants.tsv"), "--tenant", "acme")
	if code != 0 || !regexp.MustCompile(`\n\s*all\s+acme\s+2\s`).MatchString(stdout) {
		t.Errorf("usage --tenant-names: exit %d: %s%s", code, stdout, errOut)
	}

	// /metrics labels the tenant by its name, never by its key: the
	// request and the job of two texts `submit` made of the file (a job's
	// usage is counted after its result is sent, so it may still be on its
	// way).
	natstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		var jobs, texts float64
		for name, v := range scrape(t, metricsAddr) {
			if strings.Contains(name, key) {
				t.Fatalf("/metrics names the tenant's key: %s", name)
			}
			switch {
			case strings.HasPrefix(name, "jetembed_tenant_jobs_total{") && strings.Contains(name, `tenant="acme"`):
				jobs += v
			case name == `jetembed_tenant_texts_total{tenant="acme"}`:
				texts += v
			}
		}
		if jobs != 2 || texts != 3 {
			return fmt.Errorf("acme's metrics: %v jobs, %v texts; want 2 and 3", jobs, texts)
		}
		return nil
	})

	// The server binds the key token to the importer: mallory's imports
	// of acme's subjects are void, its job reaches no stream.
	mc, err := nats.Connect(url, nats.UserCredentials(malloryCreds))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	if _, err := mc.Request(strings.TrimSuffix(schema.SubjectJobs, ">")+key+".steal", []byte(`{}`), 2*time.Second); err != nats.ErrNoResponders {
		t.Errorf("mallory's job on acme's subject: %v, want no responders", err)
	}
	if l := strings.ToLower(errOut + srv.log.String()); strings.Contains(l, "permission") || strings.Contains(l, "violation") || strings.Contains(l, "bad_reply") {
		t.Errorf("a refusal on the way:\n%s", l)
	}
}

// accountsConfPermissions are the permissions of the users of
// deploy/nats/accounts.conf, by name, as user JWTs carry them.
func accountsConfPermissions(t *testing.T) map[string]jwt.Permissions {
	t.Helper()
	conf, err := os.ReadFile(accountsConf)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`\$([A-Z][A-Z0-9_]*)_PASSWORD\b`).FindAllStringSubmatch(string(conf), -1) {
		t.Setenv(m[1]+"_PASSWORD", "unused")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "accounts.conf"), conf, 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(file, []byte("include ./accounts.conf\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(file)
	if err != nil {
		t.Fatal(err)
	}
	perms := map[string]jwt.Permissions{}
	for _, u := range opts.Users {
		var p jwt.Permissions
		if sp := u.Permissions; sp != nil {
			if sp.Publish != nil {
				p.Pub.Allow, p.Pub.Deny = sp.Publish.Allow, sp.Publish.Deny
			}
			if sp.Subscribe != nil {
				p.Sub.Allow, p.Sub.Deny = sp.Subscribe.Allow, sp.Subscribe.Deny
			}
			if sp.Response != nil {
				p.Resp = &jwt.ResponsePermission{MaxMsgs: sp.Response.MaxMsgs, Expires: sp.Response.Expires}
			}
		}
		perms[u.Username] = p
	}
	if len(perms["embedder"].Pub.Allow) == 0 || len(perms["provisioner"].Pub.Allow) == 0 {
		t.Fatalf("accounts.conf: no permissions of embedder and provisioner: %v", perms)
	}
	return perms
}
