package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/fleet"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/schema"
)

// The deployment's permission file, used verbatim.
const accountsConf = "../../deploy/nats/accounts.conf"

// opsPassword is the password the test gives user (PRODUCER_A_PASSWORD ->
// producer-a).
func opsPassword(user string) string { return user + "-pw" }

// writeTestTLS writes a CA and a server certificate for 127.0.0.1.
func writeTestTLS(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	return natstest.WriteTLS(t, dir)
}

// runAccountsServer starts a TLS-only JetStream server that includes
// deploy/nats/accounts.conf as the Helm chart does, with a password for
// every user the file takes from the environment.
func runAccountsServer(t *testing.T) (url, caFile string) {
	t.Helper()
	conf, err := os.ReadFile(accountsConf)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`\$([A-Z][A-Z0-9_]*)_PASSWORD\b`).FindAllStringSubmatch(string(conf), -1) {
		t.Setenv(m[1]+"_PASSWORD", opsPassword(strings.ToLower(strings.ReplaceAll(m[1], "_", "-"))))
	}
	dir := t.TempDir()
	caFile, certFile, keyFile := writeTestTLS(t, dir)
	if err := os.WriteFile(filepath.Join(dir, "accounts.conf"), conf, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := "host: 127.0.0.1\nport: -1\n" +
		"tls {\n  cert_file: \"" + certFile + "\"\n  key_file: \"" + keyFile + "\"\n  timeout: 2\n}\n" +
		"jetstream { store_dir: \"" + filepath.Join(dir, "js") + "\" }\n" +
		"include ./accounts.conf\n"
	cfgFile := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	opts.NoLog, opts.NoSigs = true, true
	s := natstest.RunServerWithOptions(t, opts)
	return strings.Replace(s.ClientURL(), "nats://", "tls://", 1), caFile
}

// serveUnderAccounts starts the accounts.conf server, provisions it as
// `provisioner` and runs serve as `embedder` (--provision=false, then
// extra) until it is ready.
func serveUnderAccounts(t *testing.T, ctx context.Context, extra ...string) (url, caFile string, s *served) {
	t.Helper()
	url, caFile = runAccountsServer(t)
	auth := func(user string) []string {
		return []string{"--nats", url, "--nats-user", user, "--nats-tls-ca", caFile}
	}
	t.Setenv("JETEMBED_NATS_PASSWORD", opsPassword("provisioner"))
	if code, out, errOut := runCmd(t, ctx, append([]string{"provision"}, auth("provisioner")...)...); code != 0 {
		t.Fatalf("provision as provisioner: exit %d: %s%s", code, out, errOut)
	}
	t.Setenv("JETEMBED_NATS_PASSWORD", opsPassword("embedder"))
	// The fleet on (it is off on CPU by default): its KV writes are
	// inside the embedder's allow-list too.
	s = startOps(t, url, append(append(auth("embedder"), "--provision=off", "--http", "", "--fleet", "on"), extra...)...)
	s.waitReady(t)
	return url, caFile, s
}

// producer is a connection of one producer user, with its private inbox
// prefix, collecting the permission violations the server reports.
type producer struct {
	*nats.Conn
	violations chan error
}

func connectProducer(t *testing.T, url, caFile, user string) *producer {
	t.Helper()
	p := &producer{violations: make(chan error, 16)}
	nc, err := nats.Connect(url, nats.RootCAs(caFile), nats.UserInfo(user, opsPassword(user)),
		nats.CustomInboxPrefix("_INBOX_"+user),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				p.violations <- err
			}
		}))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	p.Conn = nc
	return p
}

// TestOpsPermissionsEndToEnd runs the real consumer as the `embedder` user
// of deploy/nats/accounts.conf over TLS, with the streams provisioned by
// `jetembed provision` as `provisioner`: producer-a's queued job and its
// request are embedded and answered within the allow-lists, and
// producer-b is refused when it tries to read producer-a's results.
func TestOpsPermissionsEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url, caFile, s := serveUnderAccounts(t, ctx)

	a := connectProducer(t, url, caFile, "producer-a")
	b := connectProducer(t, url, caFile, "producer-b")
	ca, err := client.New(a.Conn, client.WithTenant("producer-a"))
	if err != nil {
		t.Fatal(err)
	}
	mine, err := a.SubscribeSync("embed.results.producer-a.>")
	if err != nil {
		t.Fatal(err)
	}
	// producer-b asks for producer-a's results: the server refuses the
	// subscription, and nothing arrives on it.
	theirs, err := b.SubscribeSync("embed.results.producer-a.>")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-b.violations:
		if !strings.Contains(err.Error(), `Subscription to "embed.results.producer-a.>"`) {
			t.Errorf("producer-b: unexpected violation %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("producer-b subscribed to producer-a's results without a permission violation")
	}

	job := schema.NewJob("a-1", "a text of producer a", "and a second one")
	if ack, err := ca.Submit(ctx, job); err != nil || ack.Stream != "EMBED_JOBS" {
		t.Fatalf("producer-a: submit: %v, %+v", err, ack)
	}
	m, err := mine.NextMsg(20 * time.Second)
	if err != nil {
		t.Fatalf("producer-a: no result: %v", err)
	}
	if m.Subject != ca.ReplySubject("a-1") {
		t.Errorf("result on %s, want %s", m.Subject, ca.ReplySubject("a-1"))
	}
	checkVectors(t, decodeMsg(t, m), 2)
	if m, err := theirs.NextMsg(500 * time.Millisecond); err == nil {
		t.Errorf("producer-b received producer-a's result on %s", m.Subject)
	}
	// Nor through JetStream: a results consumer over producer-a's subject.
	bjs, err := natsjs.New(b.Conn)
	if err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	if _, err := bjs.CreateOrUpdateConsumer(short, "EMBED_RESULTS", natsjs.ConsumerConfig{
		Durable: "producer-b", FilterSubject: "embed.results.producer-a.>",
	}); err == nil {
		t.Error("producer-b created a consumer over producer-a's stored results")
	}

	// Request-reply answers each producer on its private inbox, on its
	// own endpoint subject.
	for user, p := range map[string]*producer{"producer-a": a, "producer-b": b} {
		c, err := client.New(p.Conn, client.WithTenant(user))
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Embed(ctx, "now, please")
		if err != nil {
			t.Fatalf("request: %v", err)
		}
		checkVectors(t, res, 1)
	}
	select {
	case err := <-a.violations:
		t.Errorf("producer-a hit a permission violation: %v", err)
	default:
	}

	// The consumer joined the fleet within its allow-list too: the shapes
	// its engine ran reach the engines bucket (read as an operator).
	op, err := nats.Connect(url, nats.RootCAs(caFile), nats.UserInfo("provisioner", opsPassword("provisioner")))
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	ojs, err := natsjs.New(op)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := ojs.KeyValue(ctx, "EMBED_ENGINES")
	if err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 15*time.Second, 100*time.Millisecond, func() error {
		keys, err := kv.ListKeys(ctx)
		if err != nil {
			return err
		}
		var all []string
		for k := range keys.Keys() {
			if p := fleet.ParseKey(k); p.Kind == fleet.KindShape && p.Shape.SM == "cpu" && strings.HasPrefix(p.Shape.Model, "bge-m3_") {
				return nil
			}
			all = append(all, k)
		}
		return fmt.Errorf("no shape of the model in the engines bucket; keys %v", all)
	})
	// The consumer stayed inside its allow-list the whole time (its
	// connection logs every async error, violations included).
	if l := strings.ToLower(s.log.String()); strings.Contains(l, "permission") || strings.Contains(l, "nats async error") {
		t.Errorf("serve logged a permission problem:\n%s", s.log.String())
	}
}
