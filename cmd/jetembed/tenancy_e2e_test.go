package main

// End-to-end proofs of tenancy (issue 21, reproductions 1, 2, 3 and 7)
// through a real nats-server loaded with the shipped
// deploy/nats/accounts.conf, serve running as `embedder`, and every
// producer tool as its own user. The attacker is producer-a with its
// shipped permissions; the victim is producer-b (or the gateway).

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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
	"github.com/jetembed/jetembed/schema"
)

// tenancyMaxPayload is the test server's max payload: a few long ColBERT
// texts make a result over it, stored as a blob.
const tenancyMaxPayload = 256 << 10

// tenancyRig is the shipped permission model on a TLS server, provisioned
// as `provisioner`, with serve as `embedder` (its HTTP API on too) and an
// operator connection that sees the streams and every dead letter.
type tenancyRig struct {
	url, caFile string
	s           *served
	api         string // serve's --http-api address
	prov        *nats.Conn
	pjs         natsjs.JetStream
	dlq         *nats.Subscription
}

func newTenancyRig(t *testing.T, ctx context.Context) *tenancyRig {
	return newTenancyRigConf(t, ctx, accountsConf)
}

// singleAccountConf is the one-account layout: every tenant a user of the
// fleet's account, serve run with --tenant-accounts=false.
const singleAccountConf = "../../deploy/nats/accounts-single.conf"

// layouts are the shipped permission layouts a tenancy proof runs under:
// tenants as accounts (the default) and the one-account layout.
var layouts = []struct{ name, conf string }{{"accounts", accountsConf}, {"one account", singleAccountConf}}

// newTenancyRigConf is newTenancyRig with the permission layout of conf
// (serve runs with --tenant-accounts=false under the one-account layout).
func newTenancyRigConf(t *testing.T, ctx context.Context, conf string, serveArgs ...string) *tenancyRig {
	t.Helper()
	r := &tenancyRig{}
	r.url, r.caFile = runTenancyServerConf(t, conf)
	if code, out, errOut := runCmd(t, ctx, append([]string{"provision"}, r.as(t, "provisioner")...)...); code != 0 {
		t.Fatalf("provision as provisioner: exit %d: %s%s", code, out, errOut)
	}
	if conf == singleAccountConf {
		serveArgs = append(serveArgs, "--tenant-accounts=false")
	}
	r.s = startOps(t, r.url, append(append(r.as(t, "embedder"), "--provision=off", "--http", "", "--http-api", "127.0.0.1:0"), serveArgs...)...)
	r.s.waitReady(t)
	r.api = "http://" + r.s.logField(t, "http api listening", "addr")
	nc, err := nats.Connect(r.url, nats.RootCAs(r.caFile), nats.UserInfo("provisioner", opsPassword("provisioner")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	r.prov = nc
	if r.pjs, err = natsjs.New(nc); err != nil {
		t.Fatal(err)
	}
	if r.dlq, err = nc.SubscribeSync("embed.dlq.>"); err != nil {
		t.Fatal(err)
	}
	// The server knows the subscription before any job is sent.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return r
}

// runTenancyServer is runAccountsServer with a smaller max payload.
func runTenancyServer(t *testing.T) (url, caFile string) {
	return runTenancyServerConf(t, accountsConf)
}

// runTenancyServerConf is runTenancyServer with the layout of file.
func runTenancyServerConf(t *testing.T, file string) (url, caFile string) {
	t.Helper()
	conf, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`\$([A-Z][A-Z0-9_]*)_PASSWORD\b`).FindAllStringSubmatch(string(conf), -1) {
		t.Setenv(m[1]+"_PASSWORD", opsPassword(strings.ToLower(strings.ReplaceAll(m[1], "_", "-"))))
	}
	dir := t.TempDir()
	caFile, certFile, keyFile := natstest.WriteTLS(t, dir)
	if err := os.WriteFile(filepath.Join(dir, "accounts.conf"), conf, 0o600); err != nil {
		t.Fatal(err)
	}
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
		t.Fatal(err)
	}
	opts.NoLog, opts.NoSigs = true, true
	s := natstest.RunServerWithOptions(t, opts)
	return strings.Replace(s.ClientURL(), "nats://", "tls://", 1), caFile
}

// as returns the connection flags of user and sets its password, and its
// tenant for the producer tools (through the environment, as a
// deployment sets them).
func (r *tenancyRig) as(t *testing.T, user string) []string {
	t.Helper()
	t.Setenv("JETEMBED_NATS_PASSWORD", opsPassword(user))
	tenant := ""
	if user != "embedder" && user != "provisioner" {
		tenant = user
	}
	t.Setenv("JETEMBED_TENANT", tenant)
	return []string{"--nats", r.url, "--nats-user", user, "--nats-tls-ca", r.caFile}
}

// cli runs a jetembed command as user.
func (r *tenancyRig) cli(t *testing.T, ctx context.Context, user string, cmd string, args ...string) (int, string, string) {
	t.Helper()
	return runCmd(t, ctx, append(append([]string{cmd}, r.as(t, user)...), args...)...)
}

// settled waits for the jobs stream to be empty: every job was ACKed or
// terminated.
func (r *tenancyRig) settled(t *testing.T, ctx context.Context) {
	t.Helper()
	natstest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		st, err := r.pjs.Stream(ctx, "EMBED_JOBS")
		if err != nil {
			return err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != 0 {
			return fmt.Errorf("%d jobs still queued", info.State.Msgs)
		}
		return nil
	})
}

// stored returns the subjects of EMBED_RESULTS under filter with a count.
func (r *tenancyRig) stored(t *testing.T, ctx context.Context, filter string) map[string]uint64 {
	t.Helper()
	st, err := r.pjs.Stream(ctx, "EMBED_RESULTS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, natsjs.WithSubjectFilter(filter))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects
}

// deadLetters reads n dead letters and returns code and tenant of each.
func (r *tenancyRig) deadLetters(t *testing.T, n int) [][2]string {
	t.Helper()
	var out [][2]string
	for range n {
		m, err := r.dlq.NextMsg(20 * time.Second)
		if err != nil {
			t.Fatalf("%d dead letters, want %d: %v", len(out), n, err)
		}
		out = append(out, [2]string{m.Header.Get("Embed-Dlq-Code"), m.Header.Get("Embed-Tenant")})
	}
	return out
}

// legacyJobMsgID is the Nats-Msg-Id the client sent with a job before
// tenancy: a hash of its reply and id that anyone can compute.
func legacyJobMsgID(reply, id string) string {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(reply)))
	h.Write(n[:])
	h.Write([]byte(reply))
	h.Write([]byte(id))
	return "j1-" + hex.EncodeToString(h.Sum(nil)[:16])
}

func jsonJob(id, text, reply string) []byte {
	b, _ := json.Marshal(map[string]any{"v": 1, "id": id, "texts": []string{text}, "reply": reply, "meta": map[string]any{"who": "attacker"}})
	return b
}

// TestTenancyForgedResults (reproduction 1): producer-a names producer-b's
// results as its job's reply (in the body, in the Embed-Reply header),
// preempts the victim's job by its old dedupe id and publishes on the
// victim's own job subject. None of it lands in producer-b's space: the
// forged jobs are dead-lettered bad_reply as producer-a's, and producer-b's
// `jetembed submit --run victimrun` runs its own job and writes its own
// vectors.
func TestTenancyForgedResults(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	r := newTenancyRig(t, ctx)
	a := connectProducer(t, r.url, r.caFile, "producer-a")
	ajs, err := natsjs.New(a.Conn)
	if err != nil {
		t.Fatal(err)
	}
	const attackerText, victimText = "the attacker's chosen vectors", "the victim's own text"
	victimReply := "embed.results.producer-b.victimrun.victimrun-0"
	hdrJSON := nats.Header{schema.HeaderContentType: {schema.MediaTypeJSON}}
	for _, m := range []*nats.Msg{
		{Subject: "embed.jobs.producer-a.x.1", Header: nats.Header{schema.HeaderContentType: {schema.MediaTypeJSON},
			schema.HeaderMsgID: {legacyJobMsgID(victimReply, "victimrun-0")}}, Data: jsonJob("victimrun-0", attackerText, victimReply)},
		{Subject: "embed.jobs.producer-a.x.2", Header: nats.Header{schema.HeaderContentType: {schema.MediaTypeJSON},
			schema.HeaderReply: {"embed.results.producer-b.victimrun.hdr"}}, Data: jsonJob("hdr", attackerText, "")},
	} {
		if _, err := ajs.PublishMsg(ctx, m); err != nil {
			t.Fatalf("producer-a: publish on its own subject: %v", err)
		}
	}
	// The victim's own job subject: the server refuses it.
	if err := a.PublishMsg(&nats.Msg{Subject: "embed.jobs.producer-b.victimrun.victimrun-0", Header: hdrJSON, Data: jsonJob("victimrun-0", attackerText, victimReply)}); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-a.violations:
		if !strings.Contains(err.Error(), "embed.jobs.producer-b") {
			t.Errorf("violation %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("producer-a published on producer-b's job subject")
	}
	r.settled(t, ctx)
	if got := r.stored(t, ctx, "embed.results.producer-b.>"); len(got) != 0 {
		t.Fatalf("producer-a's jobs stored results under producer-b's subjects: %v", got)
	}
	for _, dl := range r.deadLetters(t, 2) {
		if dl != [2]string{"bad_reply", "producer-a"} {
			t.Errorf("dead letter %v, want bad_reply of tenant producer-a", dl)
		}
	}

	// The victim's run: its own job runs (nothing preempted it), and its
	// output holds its own vectors.
	in := filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(in, []byte(`{"id":"v1","text":"`+victimText+`"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out.jsonl")
	code, _, errOut := r.cli(t, ctx, "producer-b", "submit", "--run", "victimrun", in, "-o", out)
	if code != 0 || strings.Contains(errOut, "already done") {
		t.Fatalf("victim's submit: exit %d: %s", code, errOut)
	}
	want := localItems(t, tinyModel(t, "tiny-hidden"), "dense", []string{victimText})[0].Dense
	lines := readOutput(t, out)
	if len(lines) != 1 || lines[0].ID != "v1" || len(lines[0].Dense) != len(want) {
		t.Fatalf("victim's output %+v", lines)
	}
	for d := range want {
		if diff := lines[0].Dense[d] - want[d]; diff > 1e-4 || diff < -1e-4 {
			t.Fatalf("victim's output holds other vectors than its text's (dimension %d)", d)
		}
	}
	if got := r.stored(t, ctx, "embed.results.producer-b.>"); len(got) != 1 || got[victimReply] != 1 {
		t.Errorf("producer-b's stored results %v, want its one job's", got)
	}
	// Its own dedupe still works: a rerun finds the job done.
	if code, _, errOut := r.cli(t, ctx, "producer-b", "submit", "--run", "victimrun", in, "-o", out); code != 0 || !strings.Contains(errOut, "1 of 1 jobs already done") {
		t.Errorf("victim's rerun: exit %d: %s", code, errOut)
	}
}

// longTexts are n texts of about a thousand tokens each: their ColBERT
// result is far over the test server's max payload.
func longTexts(n int) []string {
	texts := make([]string, n)
	for i := range texts {
		var b strings.Builder
		for w := range 320 {
			fmt.Fprintf(&b, "w%d ", (w*7+i)%500)
		}
		texts[i] = b.String()
	}
	return texts
}

// TestTenancyBlobs (reproductions 1 and 3, blobs): producer-b's ColBERT
// result goes to EMBED_BLOBS; producer-a, even knowing the object's name,
// reads nothing it can decode (the object is sealed with a key that only
// producer-b's reply holds), cannot write the bucket, and its own job of
// the same id stores another object; producer-b reads its result back
// whole afterwards.
func TestTenancyBlobs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	r := newTenancyRig(t, ctx)
	texts := longTexts(3)
	subj := "embed.results.producer-b.bigrun.bigrun-0"
	job := func(reply string, texts []string) []byte {
		lines := []string{}
		for i := range texts {
			lines = append(lines, fmt.Sprintf("b%d", i))
		}
		// The meta `jetembed submit` gives a job, so that `results` can
		// write its lines.
		b, _ := json.Marshal(map[string]any{"v": 1, "id": "bigrun-0", "texts": texts, "outputs": []string{"colbert"}, "reply": reply,
			"meta": map[string]any{"lines": lines}})
		return b
	}
	b := connectProducer(t, r.url, r.caFile, "producer-b")
	bjs, err := natsjs.New(b.Conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bjs.PublishMsg(ctx, &nats.Msg{Subject: "embed.jobs.producer-b.bigrun.bigrun-0",
		Header: nats.Header{schema.HeaderContentType: {schema.MediaTypeJSON}}, Data: job(subj, texts)}); err != nil {
		t.Fatalf("producer-b: submit: %v", err)
	}
	r.settled(t, ctx)
	// The stored reference names the blob (read as the operator).
	st, err := r.pjs.Stream(ctx, "EMBED_RESULTS")
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, subj)
	if err != nil {
		t.Fatalf("producer-b's stored result: %v", err)
	}
	ref, err := schema.DecodeResult(m.Data, schema.EncodingFor(m.Header.Get(schema.HeaderContentType)))
	if err != nil || ref.Blob == nil {
		t.Fatalf("stored result %+v, %v: want a blob reference", ref, err)
	}
	name := ref.Blob.Name

	a := connectProducer(t, r.url, r.caFile, "producer-a")
	ajs, err := natsjs.New(a.Conn)
	if err != nil {
		t.Fatal(err)
	}
	// Reading it: through the Object Store API (a consumer on the
	// bucket), and through direct gets of its meta and chunks.
	var read [][]byte
	short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
	if obs, err := ajs.ObjectStore(short, "EMBED_BLOBS"); err == nil {
		if data, err := obs.GetBytes(short, name); err == nil {
			read = append(read, data)
		}
	}
	cancelShort()
	read = append(read, directGetObject(t, ctx, a.Conn, name))
	for _, data := range read {
		if len(data) == 0 {
			continue
		}
		for _, enc := range []schema.Encoding{schema.EncodingMsgpack, schema.EncodingJSON} {
			if res, err := schema.DecodeResult(data, enc); err == nil && len(res.Items) > 0 {
				t.Fatalf("producer-a read producer-b's result from EMBED_BLOBS (%d items)", len(res.Items))
			}
		}
	}
	// Writing it: the bucket's subjects are the embedder's alone.
	for _, subj := range []string{"$O.EMBED_BLOBS.M." + base64.URLEncoding.EncodeToString([]byte(name)), "$O.EMBED_BLOBS.C.x"} {
		if err := a.Publish(subj, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.violations:
	case <-time.After(5 * time.Second):
		t.Error("producer-a wrote into EMBED_BLOBS")
	}
	// A job of producer-a's with the victim's id and other texts, in its
	// own space and into the victim's: another object, or nothing; the
	// victim's object is never replaced.
	theirs := longTexts(4)[1:]
	for i, reply := range []string{"embed.results.producer-a.bigrun.bigrun-0", subj} {
		if _, err := ajs.PublishMsg(ctx, &nats.Msg{Subject: fmt.Sprintf("embed.jobs.producer-a.bigrun.%d", i),
			Header: nats.Header{schema.HeaderContentType: {schema.MediaTypeJSON}}, Data: job(reply, theirs)}); err != nil {
			t.Fatal(err)
		}
	}
	r.settled(t, ctx)
	if m2, err := st.GetLastMsgForSubject(ctx, subj); err != nil || m2.Sequence != m.Sequence {
		t.Errorf("producer-b's stored result changed: %v", err)
	}
	obs, err := r.pjs.ObjectStore(ctx, "EMBED_BLOBS")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := obs.GetInfo(ctx, name); err != nil || info.Digest != ref.Blob.Digest || int64(info.Size) != ref.Blob.Size {
		t.Fatalf("producer-b's blob %s was replaced: %+v, %v", name, info, err)
	}
	// producer-b reads its result back whole: same blob, same digest.
	out2 := filepath.Join(t.TempDir(), "again.jsonl")
	code, stdout, errOut := r.cli(t, ctx, "producer-b", "results", "bigrun", "-o", out2)
	if code != 0 {
		t.Fatalf("producer-b: results: exit %d: %s%s", code, stdout, errOut)
	}
	lines := readOutput(t, out2)
	if len(lines) != len(texts) {
		t.Fatalf("%d lines read back, want %d", len(lines), len(texts))
	}
	for i, l := range lines {
		if l.Error != nil || len(l.ColBERT) < 100 {
			t.Errorf("line %d: %d colbert rows, error %v", i, len(l.ColBERT), l.Error)
		}
	}
}

// directGetObject reads object name of EMBED_BLOBS as nc's user may:
// direct gets of its meta message and of its chunks, nil when refused.
func directGetObject(t *testing.T, ctx context.Context, nc *nats.Conn, name string) []byte {
	t.Helper()
	get := func(req string) *nats.Msg {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		m, err := nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET.OBJ_EMBED_BLOBS", []byte(req))
		if err != nil || m.Header.Get("Status") != "" {
			return nil
		}
		return m
	}
	meta := get(`{"last_by_subj":"$O.EMBED_BLOBS.M.` + base64.URLEncoding.EncodeToString([]byte(name)) + `"}`)
	if meta == nil {
		return nil
	}
	var info struct {
		NUID   string `json:"nuid"`
		Chunks int    `json:"chunks"`
	}
	if json.Unmarshal(meta.Data, &info) != nil {
		return nil
	}
	var data []byte
	seq := uint64(0)
	for range info.Chunks {
		m := get(fmt.Sprintf(`{"seq":%d,"next_by_subj":"$O.EMBED_BLOBS.C.%s"}`, seq+1, info.NUID))
		if m == nil {
			return data
		}
		seq, _ = strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
		data = append(data, m.Data...)
	}
	return data
}

// TestTenancyRedirectedAnswers (reproduction 2): producer-a's requests
// naming another subject as their reply-to (the orders service, a guess at
// producer-b's inbox, producer-b's results) get no answer outside
// producer-a's space. With tenants as accounts the server routes every
// answer back into producer-a's own account (the service sees its routed
// reply), where those subjects reach nobody else; in the one-account
// layout they are dead-lettered bad_reply as producer-a's. The bare
// endpoint, which names no tenant, it may not request at all.
func TestTenancyRedirectedAnswers(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) { redirectedAnswers(t, l.conf) })
	}
}

func redirectedAnswers(t *testing.T, conf string) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	r := newTenancyRigConf(t, ctx, conf)
	accounts := conf == accountsConf
	a := connectProducer(t, r.url, r.caFile, "producer-a")
	b := connectProducer(t, r.url, r.caFile, "producer-b")
	caught := make(chan string, 16)
	for _, subj := range []string{"_INBOX_producer-b.>", "embed.results.producer-b.>"} {
		if _, err := b.Subscribe(subj, func(m *nats.Msg) { caught <- m.Subject }); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	// With tenants as accounts producer-a's answers come back to it, on
	// the reply it named, in its own account.
	mine, err := a.SubscribeSync("_INBOX_producer-a.mine.>")
	if err != nil {
		t.Fatal(err)
	}
	replies := []string{"orders.create", "_INBOX_producer-b.guess.1", "embed.results.producer-b.viareq"}
	for _, endpoint := range []string{"embed.v1.embed", "embed.v1.embed.producer-a"} {
		for i, reply := range append(replies, "_INBOX_producer-a.mine.1") {
			body := fmt.Sprintf(`{"id":"redir-%d","texts":["x"],"meta":{"chosen":"by the requester"}}`, i)
			if err := a.PublishMsg(&nats.Msg{Subject: endpoint, Reply: reply, Header: nats.Header{schema.HeaderContentType: {schema.MediaTypeJSON}}, Data: []byte(body)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	if m, err := mine.NextMsg(20 * time.Second); err != nil || m.Header.Get(schema.HeaderErrorCode) != "" {
		t.Fatalf("producer-a's request on its own inbox: %v, %v", m, err)
	}
	want := len(replies)
	if accounts {
		want = 0
	}
	var dls []*nats.Msg
	for len(dls) < want {
		m, err := r.dlq.NextMsg(5 * time.Second)
		if err != nil {
			break
		}
		dls = append(dls, m)
	}
	select {
	case subj := <-caught:
		t.Fatalf("producer-a's request was answered on %s", subj)
	case <-time.After(time.Second):
	}
	if len(dls) != want {
		t.Fatalf("%d dead letters, want %d", len(dls), want)
	}
	for _, m := range dls {
		if dl := [2]string{m.Header.Get("Embed-Dlq-Code"), m.Header.Get("Embed-Tenant")}; dl != [2]string{"bad_reply", "producer-a"} {
			t.Errorf("dead letter %v, want bad_reply of tenant producer-a", dl)
		}
	}
	if got := r.stored(t, ctx, "embed.results.producer-b.>"); len(got) != 0 {
		t.Errorf("answers stored under producer-b's results: %v", got)
	}
	if m, err := r.dlq.NextMsg(500 * time.Millisecond); err == nil {
		t.Errorf("a further dead letter: %s %v (the bare endpoint reached the service)", m.Subject, m.Header)
	}
	if l := r.s.log.String(); !accounts && !strings.Contains(l, "bad_reply") {
		t.Errorf("serve logged no bad_reply:\n%s", l)
	}
	// Its own requests are answered on its own inbox.
	resp, err := a.RequestMsg(&nats.Msg{Subject: "embed.v1.embed.producer-a", Header: nats.Header{schema.HeaderContentType: {schema.MediaTypeJSON}},
		Data: []byte(`{"id":"mine","texts":["x"]}`)}, 20*time.Second)
	if err != nil {
		t.Fatalf("producer-a's own request: %v", err)
	}
	res, err := schema.DecodeResult(resp.Data, schema.EncodingJSON)
	if err != nil || len(res.Items) != 1 {
		t.Errorf("answer %+v, %v", res, err)
	}
}

// TestTenancyToolsRunAsTheirUsers (reproduction 7): with the shipped
// permissions and nothing but --nats-user, its password and the tenant
// (JETEMBED_TENANT), `submit` and `results` run as producer-a, `submit
// --text` as producer-b, `gateway` as the gateway user (a ColBERT answer
// through EMBED_BLOBS included), and serve's --http-api as the embedder,
// each without a permission violation.
func TestTenancyToolsRunAsTheirUsers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	r := newTenancyRig(t, ctx)
	model := tinyModel(t, "tiny-hidden")
	texts := []string{"first line of producer a", "second line", "third"}
	var in strings.Builder
	for i, s := range texts {
		fmt.Fprintf(&in, `{"id":"a%d","text":%q}`+"\n", i, s)
	}
	inFile := filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(inFile, []byte(in.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	want := localItems(t, model, "dense", texts)
	check := func(what, path string) {
		t.Helper()
		lines := readOutput(t, path)
		if len(lines) != len(texts) {
			t.Fatalf("%s: %d lines, want %d", what, len(lines), len(texts))
		}
		for i, l := range lines {
			if l.Error != nil || len(l.Dense) != len(want[i].Dense) || l.ID != fmt.Sprintf("a%d", i) {
				t.Fatalf("%s: line %d: %+v", what, i, l)
			}
			for d := range l.Dense {
				if diff := l.Dense[d] - want[i].Dense[d]; diff > 1e-4 || diff < -1e-4 {
					t.Fatalf("%s: line %d differs from the local embed", what, i)
				}
			}
		}
	}
	noViolation := func(what, logs string) {
		t.Helper()
		if l := strings.ToLower(logs); strings.Contains(l, "permission") || strings.Contains(l, "violation") {
			t.Errorf("%s hit a permission violation:\n%s", what, logs)
		}
	}

	out := filepath.Join(t.TempDir(), "out.jsonl")
	code, _, errOut := r.cli(t, ctx, "producer-a", "submit", "--run", "arun", inFile, "-o", out)
	if code != 0 {
		t.Fatalf("submit as producer-a: exit %d: %s", code, errOut)
	}
	check("submit", out)
	noViolation("submit", errOut)
	back := filepath.Join(t.TempDir(), "back.jsonl")
	code, _, errOut = r.cli(t, ctx, "producer-a", "results", "arun", "-o", back)
	if code != 0 {
		t.Fatalf("results as producer-a: exit %d: %s", code, errOut)
	}
	check("results", back)
	noViolation("results", errOut)
	code, stdout, errOut := r.cli(t, ctx, "producer-b", "submit", "--text", texts[0])
	if code != 0 {
		t.Fatalf("submit --text as producer-b: exit %d: %s", code, errOut)
	}
	var one outLine
	if err := json.Unmarshal([]byte(strings.TrimSpace(stdout)), &one); err != nil || len(one.Dense) != len(want[0].Dense) {
		t.Errorf("submit --text printed %s (%v)", stdout, err)
	}
	noViolation("submit --text", errOut)

	// The gateway as the gateway user, and serve's own HTTP API as the
	// embedder: both answer within their timeout.
	gwLog := &lockedBuffer{}
	gwDone := make(chan int, 1)
	gwCtx, stopGW := context.WithCancel(ctx)
	defer stopGW()
	args := append([]string{"gateway"}, r.as(t, "gateway")...)
	go func() {
		gwDone <- runMain(gwCtx, append(args, "--listen", "127.0.0.1:0", "--http", "", "--log-format", "json", "--api-timeout", "20s"),
			stdio{in: strings.NewReader(""), out: io.Discard, err: gwLog})
	}()
	var gw string
	natstest.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		select {
		case code := <-gwDone:
			t.Fatalf("gateway exited with %d: %s", code, gwLog.String())
		default:
		}
		if gw = logValue(gwLog.String(), "http api listening", "addr"); gw == "" || logValue(gwLog.String(), "ready", "nats") == "" {
			return fmt.Errorf("gateway not ready")
		}
		return nil
	})
	for name, base := range map[string]string{"gateway": "http://" + gw, "serve --http-api": r.api} {
		var dense struct {
			Data []struct {
				Embedding []float64 `json:"embedding"`
			} `json:"data"`
		}
		if code := httpJSON(t, base+"/v1/embeddings", "", `{"input":"`+texts[0]+`"}`, &dense); code != 200 || len(dense.Data) != 1 {
			t.Fatalf("%s /v1/embeddings: %d", name, code)
		}
		near32(t, name+" dense", dense.Data[0].Embedding, want[0].Dense)
		resp, err := http.Get(base + "/health")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s /health: %d %s", name, resp.StatusCode, body)
		}
		// ColBERT of long texts: over the max payload, through a blob.
		input, _ := json.Marshal(map[string]any{"input": longTexts(2), "colbert": true})
		var both struct {
			Data []struct {
				ColBERT [][]float64 `json:"colbert"`
			} `json:"data"`
		}
		if code := httpJSON(t, base+"/v1/embeddings:both", "", string(input), &both); code != 200 || len(both.Data) != 2 || len(both.Data[0].ColBERT) < 100 {
			t.Errorf("%s colbert: %d, %d items", name, code, len(both.Data))
		}
	}
	noViolation("gateway", gwLog.String())
	noViolation("serve", r.s.log.String())
	stopGW()
	select {
	case code := <-gwDone:
		if code != 0 {
			t.Errorf("gateway exit %d: %s", code, gwLog.String())
		}
	case <-time.After(30 * time.Second):
		t.Error("gateway did not stop")
	}
}

// TestTenancyCacheUnderShippedPermissions: serve --cache kv as the shipped
// embedder user, in both permission layouts, reads and writes EMBED_CACHE
// (no permission violation), answers a tenant's repeated texts from it,
// and never answers another tenant's from it (the tenant is in the key).
func TestTenancyCacheUnderShippedPermissions(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			r := newTenancyRigConf(t, ctx, l.conf, "--cache", "kv")
			var in strings.Builder
			for i, s := range []string{"a licence header", "a footer", "a chunk"} {
				fmt.Fprintf(&in, `{"id":"c%d","text":%q}`+"\n", i, s)
			}
			inFile := filepath.Join(t.TempDir(), "in.jsonl")
			if err := os.WriteFile(inFile, []byte(in.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			submit := func(user, run string) string {
				t.Helper()
				code, _, errOut := r.cli(t, ctx, user, "submit", "--run", run, inFile, "-o", filepath.Join(t.TempDir(), "out.jsonl"))
				if code != 0 {
					t.Fatalf("submit as %s: exit %d: %s", user, code, errOut)
				}
				return errOut
			}
			const hit = "3 of 3 texts came from the fleet's cache"
			if first := submit("producer-a", "first"); strings.Contains(first, "from the fleet's cache") {
				t.Errorf("first run: %s", first)
			}
			if again := submit("producer-a", "again"); !strings.Contains(again, hit) {
				t.Errorf("producer-a's repeat: %s, want %q", again, hit)
			}
			if other := submit("producer-b", "theirs"); strings.Contains(other, "from the fleet's cache") {
				t.Errorf("producer-b was answered from producer-a's cache: %s", other)
			}
			if logs := strings.ToLower(r.s.log.String()); strings.Contains(logs, "permission") || strings.Contains(logs, "violation") || strings.Contains(logs, "cache is not available") {
				t.Errorf("serve could not use the cache bucket:\n%s", logs)
			}
		})
	}
}
