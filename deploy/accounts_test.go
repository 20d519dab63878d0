package deploy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/conf"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/jetembed/jetembed/internal/natstest"
)

// confVariable matches a variable used as a value (password: $X), not the
// $JS or $KV of a subject.
var confVariable = regexp.MustCompile(`[:=]\s*\$([A-Z][A-Z0-9_]*)\b`)

// accountVariables are the $VARIABLES of accounts.conf that are not defined
// in the file: the passwords the server takes from its environment.
func accountVariables(t *testing.T) []string {
	t.Helper()
	text := readFile(t, "nats/accounts.conf")
	var vars []string
	for _, m := range confVariable.FindAllStringSubmatch(text, -1) {
		name := m[1]
		defined := regexp.MustCompile(`(?m)^` + name + `\s*[:=]`).MatchString(text)
		if !defined && !slices.Contains(vars, name) {
			vars = append(vars, name)
		}
	}
	slices.Sort(vars)
	return vars
}

// setPasswords puts a password for every user variable in the environment
// (user name lowercased with dashes: PRODUCER_A_PASSWORD -> producer-a-pw).
func setPasswords(t *testing.T) {
	t.Helper()
	vars := accountVariables(t)
	if len(vars) < 4 {
		t.Fatalf("accounts.conf takes only %v from the environment", vars)
	}
	for _, v := range vars {
		t.Setenv(v, password(strings.ToLower(strings.ReplaceAll(strings.TrimSuffix(v, "_PASSWORD"), "_", "-"))))
	}
}

func password(user string) string { return user + "-pw" }

func TestAccountsConfParses(t *testing.T) {
	setPasswords(t)
	if _, err := conf.ParseFileWithChecks("nats/accounts.conf"); err != nil {
		t.Fatalf("accounts.conf: %v", err)
	}
	// The server's own processing catches what the parser accepts: unknown
	// permission fields, users in two accounts, a bad system account.
	opts, err := server.ProcessConfigFile("nats/accounts.conf")
	if err != nil {
		t.Fatalf("accounts.conf: %v", err)
	}
	var users []string
	for _, u := range opts.Users {
		users = append(users, u.Username+"@"+u.Account.Name)
		if u.Account.Name != "SYS" && u.Permissions == nil {
			t.Errorf("user %s has no permissions: it could do anything in its account", u.Username)
		}
		// Producers are denied what no allow list may ever grant them,
		// so that widening an allow list later cannot open it.
		if strings.HasPrefix(u.Username, "producer-") || u.Username == "gateway" {
			var deny []string
			if u.Permissions != nil && u.Permissions.Publish != nil {
				deny = u.Permissions.Publish.Deny
			}
			for _, must := range []string{"embed.dlq.>", "embed.results.>", "$KV.>", "$JS.ACK.>", "$JS.API.CONSUMER.MSG.NEXT.>", "embed.v1.embed"} {
				if !slices.Contains(deny, must) {
					t.Errorf("user %s: publish deny %v lacks %s", u.Username, deny, must)
				}
			}
		}
	}
	slices.Sort(users)
	// Tenants are accounts of their own name; the fleet's account holds
	// the embedders and the provisioner.
	want := []string{"embedder@EMBED", "gateway@gateway", "producer-a@producer-a", "producer-b@producer-b", "provisioner@EMBED", "sys@SYS"}
	if !slices.Equal(users, want) {
		t.Errorf("users %v, want %v", users, want)
	}
}

// runServer starts a TLS-only JetStream server that includes accounts.conf
// verbatim, as the Helm chart does.
func runServer(t *testing.T) (url, caFile string) {
	t.Helper()
	setPasswords(t)
	dir := t.TempDir()
	caFile, certFile, keyFile := natstest.WriteTLS(t, dir)
	if err := os.WriteFile(filepath.Join(dir, "accounts.conf"), []byte(readFile(t, "nats/accounts.conf")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := `host: 127.0.0.1
port: -1
tls {
  cert_file: "` + certFile + `"
  key_file: "` + keyFile + `"
  timeout: 2
}
jetstream { store_dir: "` + filepath.Join(dir, "js") + `" }
include ./accounts.conf
`
	cfgFile := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(s.Shutdown)
	return strings.Replace(s.ClientURL(), "nats://", "tls://", 1), caFile
}

// client is a connection whose permission violations are collected.
type client struct {
	*nats.Conn
	violations chan error
}

func connect(t *testing.T, url, caFile, user string, opts ...nats.Option) *client {
	t.Helper()
	c := &client{violations: make(chan error, 64)}
	opts = append(opts,
		nats.RootCAs(caFile),
		nats.UserInfo(user, password(user)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				c.violations <- err
			}
		}),
	)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	c.Conn = nc
	return c
}

// denied waits for the server to report a permission violation on subject.
func (c *client) denied(t *testing.T, op, subject string) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case err := <-c.violations:
			msg := strings.ToLower(err.Error())
			if strings.Contains(msg, "for "+op) && strings.Contains(err.Error(), `"`+subject+`"`) {
				return
			}
		case <-timeout:
			t.Errorf("%s %s was not refused", op, subject)
			return
		}
	}
}

// allowed checks that no permission violation arrived (after a round trip,
// so the server has processed everything sent before).
func (c *client) allowed(t *testing.T) {
	t.Helper()
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-c.violations:
		t.Errorf("unexpected: %v", err)
	default:
	}
}

// TestPermissionModel runs the permission model of accounts.conf against a
// real server: the whole job path works for the users meant to walk it,
// and each step outside a user's allow list is refused.
func TestPermissionModel(t *testing.T) {
	url, caFile := runServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// TLS and credentials are not optional.
	if nc, err := nats.Connect(strings.Replace(url, "tls://", "nats://", 1), nats.UserInfo("embedder", password("embedder"))); err == nil {
		nc.Close()
		t.Error("plain-text connection accepted")
	}
	if nc, err := nats.Connect(url, nats.RootCAs(caFile)); err == nil {
		nc.Close()
		t.Error("connection without credentials accepted")
	}

	// The provisioner creates what `jetembed provision` creates.
	prov := connect(t, url, caFile, "provisioner")
	pjs, err := natsjs.New(prov.Conn)
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range []natsjs.StreamConfig{
		{Name: "EMBED_JOBS", Subjects: []string{"embed.jobs.>"}, Retention: natsjs.WorkQueuePolicy},
		{Name: "EMBED_RESULTS", Subjects: []string{"embed.results.>"}},
		{Name: "EMBED_DLQ", Subjects: []string{"embed.dlq.>"}},
	} {
		if _, err := pjs.CreateStream(ctx, sc); err != nil {
			t.Fatalf("provisioner: create stream %s: %v", sc.Name, err)
		}
	}
	if _, err := pjs.CreateOrUpdateConsumer(ctx, "EMBED_JOBS", natsjs.ConsumerConfig{Durable: "embedder", AckPolicy: natsjs.AckExplicitPolicy}); err != nil {
		t.Fatalf("provisioner: create consumer: %v", err)
	}
	if _, err := pjs.CreateKeyValue(ctx, natsjs.KeyValueConfig{Bucket: "EMBED_ENGINES"}); err != nil {
		t.Fatalf("provisioner: create bucket: %v", err)
	}

	prodA := connect(t, url, caFile, "producer-a", nats.CustomInboxPrefix("_INBOX_producer-a"))
	prodB := connect(t, url, caFile, "producer-b", nats.CustomInboxPrefix("_INBOX_producer-b"))
	emb := connect(t, url, caFile, "embedder")

	// producer-a submits a job and listens on its own results subject.
	resultsA, err := prodA.SubscribeSync("embed.results.producer-a.>")
	if err != nil {
		t.Fatal(err)
	}
	ajs, err := natsjs.New(prodA.Conn)
	if err != nil {
		t.Fatal(err)
	}
	// The publish crosses from producer-a's account into EMBED's jobs
	// stream through the service import, and the stream's PubAck comes
	// back through the reply the server made for it.
	ack, err := ajs.Publish(ctx, "embed.jobs.producer-a.run.a1", []byte(`{"v":1,"id":"a1","texts":["x"],"reply":"embed.results.producer-a.a1"}`),
		natsjs.WithExpectLastSequencePerSubject(0), natsjs.WithMsgID("a1"))
	if err != nil {
		t.Fatalf("producer-a: publish job: %v", err)
	}
	if ack.Stream != "EMBED_JOBS" || ack.Sequence != 1 || ack.Duplicate {
		t.Errorf("producer-a: PubAck %+v, want EMBED_JOBS seq 1", ack)
	}
	// Dedupe works across the import too.
	if ack, err := ajs.Publish(ctx, "embed.jobs.producer-a.run.a1", []byte(`{"v":1,"id":"a1","texts":["x"]}`), natsjs.WithMsgID("a1")); err != nil || !ack.Duplicate {
		t.Errorf("producer-a: the same job again: %+v, %v; want a duplicate", ack, err)
	}
	if st, err := pjs.Stream(ctx, "EMBED_JOBS"); err != nil {
		t.Fatal(err)
	} else if info, err := st.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Fatalf("EMBED_JOBS after producer-a's publish: %+v, %v", info, err)
	} else if m, err := st.GetLastMsgForSubject(ctx, "embed.jobs.producer-a.run.a1"); err != nil || m.Subject != "embed.jobs.producer-a.run.a1" {
		t.Fatalf("EMBED_JOBS holds %v, %v", m, err)
	}
	prodA.allowed(t)
	// Not under another tenant's token, nor on the bare service subject
	// (a request there names no tenant).
	for _, subj := range []string{"embed.jobs.producer-b.run.b1", "embed.jobs.x", "embed.v1.embed", "embed.v1.embed.producer-b"} {
		if err := prodA.Publish(subj, []byte(`{"v":1,"id":"forged","texts":["x"]}`)); err != nil {
			t.Fatal(err)
		}
		prodA.denied(t, "publish", subj)
	}

	// producer-b cannot read producer-a's results, nor everyone's.
	for _, subj := range []string{"embed.results.producer-a.>", "embed.results.>", "_INBOX_producer-a.>"} {
		if _, err := prodB.SubscribeSync(subj); err != nil {
			t.Fatal(err)
		}
		prodB.denied(t, "subscription", subj)
	}
	// Nor pull jobs, nor administer streams.
	if err := prodB.Publish("$JS.API.CONSUMER.MSG.NEXT.EMBED_JOBS.embedder", []byte(`{"batch":1}`)); err != nil {
		t.Fatal(err)
	}
	prodB.denied(t, "publish", "$JS.API.CONSUMER.MSG.NEXT.EMBED_JOBS.embedder")
	if err := prodB.Publish("$JS.API.STREAM.DELETE.EMBED_JOBS", nil); err != nil {
		t.Fatal(err)
	}
	prodB.denied(t, "publish", "$JS.API.STREAM.DELETE.EMBED_JOBS")
	// Nor forge dead letters or results, nor write the fleet's KV bucket
	// (the KV-poisoning reply of issue 11, sent directly), nor settle
	// jobs: the deny list of every producer.
	for _, subj := range []string{
		"embed.dlq.bad_payload", "embed.dlq.x.y", "embed.results.producer-b.b1", "embed.results.producer-a.a1",
		"$KV.EMBED_ENGINES.bge-m3_abc.cpu.b1000000000000000.s8192", "$JS.ACK.EMBED_JOBS.embedder.1.1.1.1.1.1",
	} {
		for _, p := range []*client{prodA, prodB} {
			if err := p.Publish(subj, []byte("forged")); err != nil {
				t.Fatal(err)
			}
			p.denied(t, "publish", subj)
		}
	}

	// The embedder pulls the job, publishes the result and a DLQ copy, ACKs.
	ejs, err := natsjs.New(emb.Conn)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := ejs.Consumer(ctx, "EMBED_JOBS", "embedder")
	if err != nil {
		t.Fatalf("embedder: bind consumer: %v", err)
	}
	batch, err := cons.Fetch(1, natsjs.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []natsjs.Msg
	for m := range batch.Messages() {
		got = append(got, m)
	}
	if len(got) != 1 {
		t.Fatalf("embedder fetched %d jobs (%v), want 1", len(got), batch.Error())
	}
	if _, err := ejs.Publish(ctx, "embed.results.producer-a.a1", []byte(`{"v":1,"id":"a1"}`)); err != nil {
		t.Fatalf("embedder: publish result: %v", err)
	}
	if _, err := ejs.Publish(ctx, "embed.dlq.bad_payload", []byte(`{}`)); err != nil {
		t.Fatalf("embedder: publish DLQ copy: %v", err)
	}
	if err := got[0].DoubleAck(ctx); err != nil {
		t.Fatalf("embedder: ack: %v", err)
	}
	if _, err := resultsA.NextMsg(5 * time.Second); err != nil {
		t.Errorf("producer-a did not receive its result: %v", err)
	}
	// The embedder reads no results and touches no other stream.
	if _, err := emb.SubscribeSync("embed.results.>"); err != nil {
		t.Fatal(err)
	}
	emb.denied(t, "subscription", "embed.results.>")
	if err := emb.Publish("$JS.API.STREAM.PURGE.EMBED_JOBS", nil); err != nil {
		t.Fatal(err)
	}
	emb.denied(t, "publish", "$JS.API.STREAM.PURGE.EMBED_JOBS")
	// Dead letters go to embed.dlq.<code>[.<tenant>], nothing deeper.
	if err := emb.Publish("embed.dlq.a.b.c", nil); err != nil {
		t.Fatal(err)
	}
	emb.denied(t, "publish", "embed.dlq.a.b.c")

	// The embedder shares engine shapes through the KV bucket.
	kv, err := ejs.KeyValue(ctx, "EMBED_ENGINES")
	if err != nil {
		t.Fatalf("embedder: bind bucket: %v", err)
	}
	w, err := kv.Watch(ctx, "bge-m3.sm89.>")
	if err != nil {
		t.Fatalf("embedder: watch: %v", err)
	}
	defer w.Stop()
	if _, err := kv.Create(ctx, "bge-m3.sm89.8x512", []byte("ok")); err != nil {
		t.Fatalf("embedder: create key: %v", err)
	}
	if _, err := kv.Create(ctx, "bge-m3.sm89.8x512", []byte("again")); !errors.Is(err, natsjs.ErrKeyExists) {
		t.Errorf("second create = %v, want ErrKeyExists (the compile lock)", err)
	}
	if e, err := kv.Get(ctx, "bge-m3.sm89.8x512"); err != nil || string(e.Value()) != "ok" {
		t.Errorf("embedder: get = %v, %v", e, err)
	}
	watched := false
	for !watched {
		select {
		case e := <-w.Updates():
			watched = e != nil && e.Key() == "bge-m3.sm89.8x512"
		case <-ctx.Done():
			t.Fatal("embedder: watch saw no update")
		}
	}
	emb.allowed(t)

	// producer-a reads its stored results through a push consumer of its
	// own results.
	// The consumer lives in EMBED; it delivers to embed.deliver.producer-a.>,
	// which EMBED exports to producer-a alone.
	inbox := "embed.deliver.producer-a.mine"
	pc, err := ajs.CreatePushConsumer(ctx, "EMBED_RESULTS", natsjs.ConsumerConfig{
		Name: "producer-a_r0", FilterSubject: "embed.results.producer-a.>", DeliverSubject: inbox, AckPolicy: natsjs.AckNonePolicy,
		FlowControl: true, IdleHeartbeat: time.Second,
	})
	if err != nil {
		t.Fatalf("producer-a: create its results consumer: %v", err)
	}
	got2 := make(chan string, 1)
	cc, err := pc.Consume(func(m natsjs.Msg) { got2 <- m.Subject() })
	if err != nil {
		t.Fatal(err)
	}
	select {
	case subj := <-got2:
		if subj != "embed.results.producer-a.a1" {
			t.Errorf("producer-a: result on %s", subj)
		}
	case <-time.After(5 * time.Second):
		t.Error("producer-a: no stored result delivered")
	}
	cc.Stop()
	prodA.allowed(t)
	// Not over everyone's results, nor another tenant's, nor with the
	// filter hidden in the body, nor by pulling, inspecting or deleting
	// consumers by name.
	for _, filter := range []string{"embed.results.>", "embed.results.producer-b.>", "embed.results.*.>"} {
		short, cancelShort := context.WithTimeout(ctx, time.Second)
		_, err := ajs.CreatePushConsumer(short, "EMBED_RESULTS", natsjs.ConsumerConfig{
			Name: "theirs", FilterSubject: filter, DeliverSubject: prodA.NewInbox(),
		})
		cancelShort()
		if err == nil {
			t.Errorf("producer-a created a consumer over %s", filter)
		}
		prodA.denied(t, "publish", "$JS.API.CONSUMER.CREATE.EMBED_RESULTS.theirs."+filter)
	}
	for _, subj := range []string{
		"$JS.API.CONSUMER.CREATE.EMBED_RESULTS", "$JS.API.CONSUMER.CREATE.EMBED_RESULTS.theirs",
		"$JS.API.CONSUMER.MSG.NEXT.EMBED_RESULTS.producer-b", "$JS.API.CONSUMER.INFO.EMBED_RESULTS.mine",
		"$JS.API.CONSUMER.DELETE.EMBED_RESULTS.mine", "$JS.API.CONSUMER.NAMES.EMBED_RESULTS",
		"$JS.API.DIRECT.GET.EMBED_RESULTS", "$JS.API.STREAM.MSG.GET.EMBED_RESULTS", "$JS.API.STREAM.INFO.EMBED_RESULTS",
		"$JS.API.CONSUMER.CREATE.OBJ_EMBED_BLOBS.x.$O.EMBED_BLOBS.C.x",
	} {
		if err := prodA.Publish(subj, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		prodA.denied(t, "publish", subj)
	}

	// Request-reply: the embed service answers producer-a's private inbox,
	// granted to the embedder (no allow_responses), and nothing else: a
	// reply-to elsewhere is refused by the server even if the service
	// tried.
	svc, err := micro.AddService(emb.Conn, micro.Config{
		Name: "embed", Version: "1.0.0", QueueGroup: "embed",
		Endpoint: &micro.EndpointConfig{Subject: "embed.v1.embed.*", Handler: micro.HandlerFunc(func(r micro.Request) {
			_ = r.Respond([]byte("vectors"))
		})},
	})
	if err != nil {
		t.Fatalf("embedder: add service: %v", err)
	}
	defer svc.Stop()
	emb.allowed(t)
	if resp, err := prodA.Request("embed.v1.embed.producer-a", []byte(`{"v":1,"id":"r1","texts":["x"]}`), 5*time.Second); err != nil || string(resp.Data) != "vectors" {
		t.Errorf("producer-a: request embed.v1.embed.producer-a = %v, %v", resp, err)
	}
	prodA.allowed(t)
	// Whatever reply producer-a names, the service sees the server's routed
	// reply (_R_.), and the answer goes back into producer-a's account:
	// the embedder is granted no tenant's inbox.
	own, err := prodA.SubscribeSync("_INBOX_producer-a.mine")
	if err != nil {
		t.Fatal(err)
	}
	if err := prodA.PublishRequest("embed.v1.embed.producer-a", "_INBOX_producer-a.mine", []byte(`{"v":1,"id":"r2","texts":["x"]}`)); err != nil {
		t.Fatal(err)
	}
	if m, err := own.NextMsg(5 * time.Second); err != nil || string(m.Data) != "vectors" {
		t.Errorf("producer-a: answer on its own reply: %v, %v", m, err)
	}
	if err := emb.Publish("_INBOX_producer-a.mine", nil); err != nil {
		t.Fatal(err)
	}
	emb.denied(t, "publish", "_INBOX_producer-a.mine")
}
