package main

// Reproduction 4 of issue 21 (storage growth) through `jetembed serve` and
// an in-process nats-server: malformed large jobs no longer copy
// themselves whole into EMBED_DLQ, a small job asking for a huge ColBERT
// result is refused before the engine runs it, and `jetembed dlq` lists,
// shows and replays what is kept whole.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// streamState returns a stream's message and byte counts.
func streamState(t *testing.T, js natsjs.JetStream, name string) (msgs, bytes uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs, info.State.Bytes
}

// TestDLQFloodBounded: 40 malformed jobs of 1 MB each, and one of 1 MB
// whose reply the policy refuses, add a few KiB each to EMBED_DLQ, not
// their size (before: 100 such jobs added 95 MiB). Each letter records
// the body's size and SHA-256 and says it is an excerpt.
func TestDLQFloodBounded(t *testing.T) {
	srv := natstest.RunServer(t)
	startServe(t, srv.ClientURL())
	nc := natstest.Connect(t, srv.ClientURL())
	js, _ := natsjs.New(nc)
	_, before := streamState(t, js, "EMBED_DLQ")
	const n, size = 40, 1 << 20
	sums := map[string]string{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range n + 1 {
		id := fmt.Sprintf("flood-%02d", i)
		var body []byte
		if i < n {
			body = fmt.Appendf(nil, `{"v":1,"id":%q,"texts":["%s`, id, strings.Repeat("x", size)) // never closed
		} else {
			body = fmt.Appendf(nil, `{"v":1,"id":%q,"reply":"$SYS.nope","texts":["%s"]}`, id, strings.Repeat("y ", size/2))
		}
		sum := sha256.Sum256(body)
		sums[id] = hex.EncodeToString(sum[:]) + "/" + strconv.Itoa(len(body))
		m := &nats.Msg{Subject: "embed.jobs.flood", Header: nats.Header{"Content-Type": {"application/json"}}, Data: body}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	natstest.CheckFor(t, 60*time.Second, 20*time.Millisecond, func() error {
		if msgs, _ := streamState(t, js, "EMBED_DLQ"); msgs < n+1 {
			return fmt.Errorf("%d dead letters", msgs)
		}
		return nil
	})
	_, after := streamState(t, js, "EMBED_DLQ")
	t.Logf("EMBED_DLQ grew by %d KiB for %d jobs of %d KiB", (after-before)>>10, n+1, size>>10)
	if grown := after - before; grown > (n+1)*(3*consumer.DLQExcerptBytes) {
		t.Errorf("EMBED_DLQ grew by %d bytes for %d jobs: over %d KiB each", grown, n+1, 3*consumer.DLQExcerptBytes>>10)
	}
	codes := map[string]int{}
	dl, err := jetstream.OpenDeadLetters(js.Conn(), "EMBED_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	for l, err := range dl.Letters(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		codes[l.Code]++
		if got := l.SHA256 + "/" + strconv.Itoa(l.Size); got != sums[l.JobID] || !l.Excerpt || len(l.Data) != consumer.DLQExcerptBytes {
			t.Errorf("letter %d of %s: sha/size %s, want %s; excerpt %v, %d bytes kept", l.Seq, l.JobID, got, sums[l.JobID], l.Excerpt, len(l.Data))
		}
	}
	if codes["bad_payload"] != n || codes["bad_reply"] != 1 {
		t.Errorf("dead letters by code %v, want %d bad_payload and 1 bad_reply", codes, n)
	}
	// The operator's view: listed as excerpts, never replayed.
	code, out, errOut := runCmd(t, ctx, "dlq", "list", "--nats", srv.ClientURL(), "--code", "bad_reply")
	if code != 0 || !strings.Contains(out, "excerpt 4096") || !strings.Contains(out, "flood-40") || strings.Contains(out, "flood-00") {
		t.Errorf("dlq list --code bad_reply: exit %d\n%s%s", code, out, errOut)
	}
	code, _, errOut = runCmd(t, ctx, "dlq", "replay", "--nats", srv.ClientURL(), "1")
	if code != 1 || !strings.Contains(errOut, "keeps only an excerpt") {
		t.Errorf("dlq replay of an excerpt: exit %d: %s", code, errOut)
	}
}

// TestResultAmplificationRefused: one 1 MB job of 1024 texts asking for
// ColBERT made a 64 MiB blob on the 32-dim test model (~2 GB on BGE-M3).
// With serve's default --max-result-bytes it is refused result_too_large
// before any session runs: no blob, no token run, an error result, and a
// dead letter of a few KiB. A normal job still passes.
func TestResultAmplificationRefused(t *testing.T) {
	srv := natstest.RunServer(t)
	s := startOps(t, srv.ClientURL())
	addr := s.logField(t, "http listening", "addr")
	if limit, _ := strconv.ParseFloat(s.logField(t, "ready", "max_result_bytes"), 64); limit != 32<<20 {
		t.Errorf("default result cap %v on the tiny model, want 32 MiB", limit)
	}
	nc := natstest.Connect(t, srv.ClientURL())
	js, _ := natsjs.New(nc)
	results, err := nc.SubscribeSync("embed.results.amp.>")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	submit := func(id string, texts []string) *schema.Result {
		t.Helper()
		j := schema.NewJob(id, texts...)
		j.Reply, j.Outputs = "embed.results.amp."+id, []schema.Output{schema.OutputColBERT}
		data, err := schema.EncodeJob(j, schema.EncodingJSON)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("job %s: %d texts, %d KiB", id, len(texts), len(data)>>10)
		m := &nats.Msg{Subject: "embed.jobs.amp", Header: nats.Header(schema.JobHeader(j, schema.EncodingJSON)), Data: data}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
		msg, err := results.NextMsg(30 * time.Second)
		if err != nil {
			t.Fatalf("job %s: no result: %v", id, err)
		}
		res, err := schema.DecodeResult(msg.Data, schema.EncodingJSON)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	runs := func() float64 { return scrape(t, addr)["jetembed_run_seconds_count"] }
	before := runs()
	texts := make([]string, 1024)
	for i := range texts {
		texts[i] = strings.TrimSpace(strings.Repeat(fmt.Sprintf("w%d ", i%97), 240))
	}
	res := submit("huge", texts)
	if res.Error == nil || res.Error.Code != schema.CodeResultTooLarge || res.Blob != nil {
		t.Fatalf("amplifying job: %+v, want result_too_large without a blob", res)
	}
	t.Logf("refused: %s", res.Error.Message)
	if got := runs(); got != before {
		t.Errorf("%v session runs for the refused job, want none", got-before)
	}
	if msgs, _ := streamState(t, js, "OBJ_EMBED_BLOBS"); msgs != 0 {
		t.Errorf("%d blob chunks stored", msgs)
	}
	if msgs, bytes := streamState(t, js, "EMBED_DLQ"); msgs != 1 || bytes > 3*consumer.DLQExcerptBytes {
		t.Errorf("EMBED_DLQ: %d letters, %d bytes; want 1 excerpt", msgs, bytes)
	}
	if ok := submit("normal", texts[:16]); ok.Error != nil || len(ok.Items) != 16 || len(ok.Items[0].ColBERT) == 0 {
		t.Errorf("normal ColBERT job: %+v", ok.Error)
	}
}

// TestDLQReplay: a job whose result was not published on its last
// delivery is dead-lettered whole (after an error result went to its
// reply, as retries running out leave it); `jetembed dlq replay` queues it
// again as it arrived, and its result is stored beside the first one
// instead of being dropped by the results stream's duplicate window.
// Replaying it twice queues it once; a request-reply letter, an excerpt
// and a tampered body are refused.
func TestDLQReplay(t *testing.T) {
	srv := natstest.RunServer(t)
	url := srv.ClientURL()
	startServe(t, url)
	nc := natstest.Connect(t, url)
	js, _ := natsjs.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pub, err := jetstream.NewPublisher(nc, jetstream.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	job := schema.NewJob("replay-me", "a text worth a second try")
	job.Reply = "embed.results.replay.replay-me"
	body, err := schema.EncodeJob(job, schema.EncodingMsgpack)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	letter := func(code, subject string, data []byte, excerpt bool) {
		t.Helper()
		h := schema.JobHeader(job, schema.EncodingMsgpack)
		h[jetstream.HeaderSubject] = []string{subject}
		dl := consumer.DeadLetter{JobID: job.ID, MsgID: "dlq-" + code + subject, Code: code, Message: "test", NumDelivered: 5,
			BodySize: len(body), BodySHA256: hex.EncodeToString(sum[:]), Excerpt: excerpt}
		if err := pub.PublishDLQ(ctx, dl, h, data); err != nil {
			t.Fatal(err)
		}
	}
	letter("publish_failed", "embed.jobs.replay", body, false)      // seq 1
	letter("overloaded", schema.SubjectEmbed, body, false)          // seq 2: a request
	letter("bad_payload", "embed.jobs.replay", body[:10], true)     // seq 3: an excerpt
	letter("publish_denied", "embed.jobs.replay", body[:10], false) // seq 4: does not match its digest
	// The error result the last delivery sent, under the job's result id.
	first := schema.ErrorResult(job.ID, &schema.Error{Code: schema.CodeOverloaded, Message: "full", Retriable: true})
	fd, _ := schema.EncodeResult(first, schema.EncodingMsgpack)
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: job.Reply, Header: nats.Header(schema.ResultHeader(first, "replay", job.Reply, schema.EncodingMsgpack)), Data: fd},
		natsjs.WithMsgID(schema.ResultMsgID("replay", job.Reply, job.ID))); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := runCmd(t, ctx, "dlq", "list", "--nats", url, "--json")
	if code != 0 || strings.Count(out, "\n") != 4 {
		t.Fatalf("dlq list: exit %d\n%s%s", code, out, errOut)
	}
	var l1 letterLine
	if err := json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &l1); err != nil || !l1.Replayable || l1.Size != len(body) || l1.Job != job.ID {
		t.Errorf("first letter %+v, %v", l1, err)
	}
	code, out, _ = runCmd(t, ctx, "dlq", "show", "--nats", url, "1")
	if code != 0 || !strings.Contains(out, "Embed-Dlq-Sha256: "+hex.EncodeToString(sum[:])) || !strings.Contains(out, "replayable: yes") {
		t.Errorf("dlq show 1: exit %d\n%s", code, out)
	}
	if code, out, _ = runCmd(t, ctx, "dlq", "show", "--raw", "--nats", url, "1"); code != 0 || out != string(body) {
		t.Errorf("dlq show --raw 1: exit %d, %d bytes, want the job's %d", code, len(out), len(body))
	}
	for seq, want := range map[string]string{"2": "not a subject of the jobs stream", "3": "keeps only an excerpt", "4": "does not match its recorded size and SHA-256"} {
		if code, _, errOut := runCmd(t, ctx, "dlq", "replay", "--nats", url, seq); code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("dlq replay %s: exit %d, want 1 and %q: %s", seq, code, want, errOut)
		}
	}
	code, out, errOut = runCmd(t, ctx, "dlq", "replay", "--nats", url, "1")
	if code != 0 || !strings.Contains(out, "replayed 1 (publish_failed, job replay-me) to embed.jobs.replay") {
		t.Fatalf("dlq replay 1: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, _ = runCmd(t, ctx, "dlq", "replay", "--nats", url, "1"); code != 0 || !strings.Contains(out, "already replayed") {
		t.Errorf("second replay: exit %d: %s", code, out)
	}
	natstest.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		s, err := js.Stream(ctx, "EMBED_RESULTS")
		if err != nil {
			return err
		}
		info, err := s.Info(ctx, natsjs.WithSubjectFilter(job.Reply))
		if err != nil {
			return err
		}
		if n := info.State.Subjects[job.Reply]; n < 2 {
			return fmt.Errorf("%d results stored for the job (the replay's dropped as a duplicate?)", n)
		}
		return nil
	})
	stored := natstest.StreamMsgs(t, js, "EMBED_RESULTS", job.Reply)
	res, err := schema.DecodeResult(stored[1].Data(), schema.EncodingMsgpack)
	if err != nil || res.Error != nil || res.ID != job.ID || len(res.Items) != 1 || len(res.Items[0].Dense) == 0 {
		t.Errorf("replayed job's result %+v, %v", res, err)
	}
	if id := stored[1].Headers().Get(schema.HeaderMsgID); !strings.HasPrefix(id, schema.ResultMsgID("replay", job.Reply, job.ID)+"-") {
		t.Errorf("replayed result's Nats-Msg-Id %q", id)
	}
	if got := natstest.StreamCount(t, js, "EMBED_JOBS"); got != 0 {
		t.Errorf("%d jobs left queued: the second replay was queued too", got)
	}
	if code, _, errOut := runCmd(t, ctx, "dlq", "replay", "--nats", url, "--delete", "--code", "publish_failed"); code != 0 {
		t.Errorf("replay --delete --code: exit %d: %s", code, errOut)
	}
	if msgs, _ := streamState(t, js, "EMBED_DLQ"); msgs != 3 {
		t.Errorf("%d letters after --delete, want 3", msgs)
	}
}

// TestDLQReplayAsProvisioner: with deploy/nats/accounts.conf, the
// provisioner (the operators' user) lists a dead letter the embedder
// stored and replays its job to the subject it came on.
func TestDLQReplayAsProvisioner(t *testing.T) {
	url, caFile := runAccountsServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	auth := func(user string) []string {
		return []string{"--nats", url, "--nats-user", user, "--nats-tls-ca", caFile}
	}
	t.Setenv("JETEMBED_NATS_PASSWORD", opsPassword("provisioner"))
	if code, out, errOut := runCmd(t, ctx, append([]string{"provision"}, auth("provisioner")...)...); code != 0 {
		t.Fatalf("provision: exit %d: %s%s", code, out, errOut)
	}
	emb, err := nats.Connect(url, nats.RootCAs(caFile), nats.UserInfo("embedder", opsPassword("embedder")))
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	pub, err := jetstream.NewPublisher(emb, jetstream.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	job := schema.NewJob("again", "text")
	job.Reply = "embed.results.producer-a.again"
	body, _ := schema.EncodeJob(job, schema.EncodingMsgpack)
	sum := sha256.Sum256(body)
	h := schema.JobHeader(job, schema.EncodingMsgpack)
	h[jetstream.HeaderSubject] = []string{"embed.jobs.producer-a"}
	if err := pub.PublishDLQ(ctx, consumer.DeadLetter{JobID: job.ID, MsgID: "dlq-x", Code: "publish_failed", NumDelivered: 5,
		BodySize: len(body), BodySHA256: hex.EncodeToString(sum[:])}, h, body); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCmd(t, ctx, append([]string{"dlq", "list"}, auth("provisioner")...)...); code != 0 || !strings.Contains(out, "again") {
		t.Fatalf("dlq list as provisioner: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut := runCmd(t, ctx, append([]string{"dlq", "replay", "1"}, auth("provisioner")...)...)
	if code != 0 || !strings.Contains(out, "to embed.jobs.producer-a: EMBED_JOBS seq 1") {
		t.Fatalf("dlq replay as provisioner: exit %d\n%s%s", code, out, errOut)
	}
}
