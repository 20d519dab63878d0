package main

// The attacker's review of tenancy (issue 21), as a test: producer-a, with
// the shipped permissions, tries every way it has found to forge,
// redirect, drop, overwrite or read producer-b's work, against a real
// serve as `embedder`. Each attempt must fail, and producer-b's own job
// must come through untouched at the end.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// refused waits for the server's permission violation on subject.
func (p *producer) refused(t *testing.T, op, subject string) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case err := <-p.violations:
			if strings.Contains(strings.ToLower(err.Error()), "for "+op) && strings.Contains(err.Error(), `"`+subject+`"`) {
				return
			}
		case <-timeout:
			t.Errorf("%s %s was not refused", op, subject)
			return
		}
	}
}

func TestTenancyAttackerReview(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) { attackerReview(t, l.conf) })
	}
}

func attackerReview(t *testing.T, conf string) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	r := newTenancyRigConf(t, ctx, conf)
	a := connectProducer(t, r.url, r.caFile, "producer-a")
	b := connectProducer(t, r.url, r.caFile, "producer-b")
	ajs, err := natsjs.New(a.Conn)
	if err != nil {
		t.Fatal(err)
	}
	// producer-b listens live on its results and on the inbox producer-a
	// guesses at.
	caught := make(chan string, 64)
	for _, subj := range []string{"_INBOX_producer-b.guess.>", "_INBOX_producer-b.x.>", "embed.results.producer-b.>"} {
		if _, err := b.Subscribe(subj, func(m *nats.Msg) { caught <- m.Subject }); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	hdr := func(kv ...string) nats.Header {
		h := nats.Header{schema.HeaderContentType: {schema.MediaTypeJSON}}
		for i := 0; i+1 < len(kv); i += 2 {
			h[kv[i]] = []string{kv[i+1]}
		}
		return h
	}

	t.Run("publish outside its subjects", func(t *testing.T) {
		for _, subj := range []string{
			"embed.jobs.producer-b", "embed.jobs.producer-b.run.doc-1", "embed.jobs", "embed.jobs.x",
			"embed.v1.embed", "embed.v1.embed.producer-b", "$SRV.PING.embed", "$SRV.INFO.embed",
			"embed.results.producer-b.run.doc-1", "embed.results.producer-a.run.doc-1",
			"embed.dlq.bad_reply", "$KV.EMBED_ENGINES.bge-m3_x.cpu.b1.s8192", "$O.EMBED_BLOBS.C.x",
			"$JS.ACK.EMBED_JOBS.embedder.1.1.1.1.1.1", "$JS.ACK.EMBED_RESULTS.x.1.1.1.1.1.1",
			"_INBOX.x", "_INBOX_producer-b.x",
			"$JS.API.CONSUMER.MSG.NEXT.EMBED_JOBS.embedder", "$JS.API.CONSUMER.MSG.NEXT.EMBED_RESULTS.x",
			"$JS.API.CONSUMER.INFO.EMBED_RESULTS.x", "$JS.API.CONSUMER.DELETE.EMBED_RESULTS.x",
			"$JS.API.CONSUMER.LIST.EMBED_RESULTS", "$JS.API.CONSUMER.NAMES.EMBED_RESULTS",
			"$JS.API.CONSUMER.CREATE.EMBED_RESULTS", "$JS.API.CONSUMER.DURABLE.CREATE.EMBED_RESULTS.x",
			"$JS.API.CONSUMER.CREATE.EMBED_RESULTS.x", "$JS.API.CONSUMER.CREATE.EMBED_RESULTS.x.embed.results.>",
			"$JS.API.CONSUMER.CREATE.EMBED_RESULTS.x.embed.results.producer-b.>",
			"$JS.API.CONSUMER.CREATE.EMBED_DLQ.x.embed.dlq.>", "$JS.API.CONSUMER.CREATE.EMBED_JOBS.x.embed.jobs.producer-b.>",
			"$JS.API.CONSUMER.CREATE.OBJ_EMBED_BLOBS.x.$O.EMBED_BLOBS.C.x", "$JS.API.CONSUMER.CREATE.KV_EMBED_ENGINES.x.$KV.EMBED_ENGINES.>",
			"$JS.API.DIRECT.GET.EMBED_RESULTS", "$JS.API.DIRECT.GET.EMBED_RESULTS.embed.results.producer-b.run.doc-1",
			"$JS.API.STREAM.MSG.GET.EMBED_RESULTS", "$JS.API.STREAM.MSG.GET.OBJ_EMBED_BLOBS", "$JS.API.STREAM.INFO.EMBED_RESULTS",
			"$JS.API.STREAM.INFO.OBJ_EMBED_BLOBS", "$JS.API.DIRECT.GET.KV_EMBED_ENGINES", "$JS.API.STREAM.PURGE.OBJ_EMBED_BLOBS",
			"$JS.API.STREAM.DELETE.EMBED_RESULTS", "$JS.API.STREAM.NAMES",
		} {
			if err := a.Publish(subj, []byte(`{"v":1,"id":"x","texts":["x"]}`)); err != nil {
				t.Fatal(err)
			}
			a.refused(t, "publish", subj)
		}
	})
	t.Run("subscribe to others", func(t *testing.T) {
		for _, subj := range []string{"embed.results.producer-b.>", "embed.results.>", "_INBOX_producer-b.>", "_INBOX.>",
			"embed.dlq.>", "embed.jobs.>", "embed.v1.embed.producer-b", "$KV.>", ">"} {
			if _, err := a.SubscribeSync(subj); err != nil {
				t.Fatal(err)
			}
			a.refused(t, "subscription", subj)
		}
	})
	t.Run("consumers over others' results", func(t *testing.T) {
		for _, cfg := range []natsjs.ConsumerConfig{
			{Name: "c1", FilterSubject: "embed.results.producer-b.>"},
			{Name: "c2", FilterSubject: "embed.results.*.>"},
			{Name: "c3", FilterSubject: "embed.results.>"},
			{Name: "c4", FilterSubjects: []string{"embed.results.producer-b.>"}},
			{Name: "c5"},
		} {
			cfg.DeliverSubject = a.NewInbox()
			short, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := ajs.CreatePushConsumer(short, "EMBED_RESULTS", cfg)
			cancel()
			if err == nil {
				t.Errorf("producer-a created %+v", cfg)
			}
		}
		// The create subject names its own results, the body another
		// filter: the server refuses the mismatch.
		req, _ := json.Marshal(map[string]any{"stream_name": "EMBED_RESULTS", "config": map[string]any{"name": "producer-a_r0",
			"filter_subjects": []string{"embed.results.producer-b.>"}, "deliver_subject": a.NewInbox()}})
		resp, err := a.Request("$JS.API.CONSUMER.CREATE.EMBED_RESULTS.producer-a_r0.embed.results.producer-a.>", req, 5*time.Second)
		if err != nil || !strings.Contains(string(resp.Data), `"error"`) {
			t.Errorf("create with a body filter of producer-b: %v %v", err, resp)
		}
		req, _ = json.Marshal(map[string]any{"stream_name": "EMBED_RESULTS", "config": map[string]any{"name": "producer-a_r1",
			"filter_subject": "embed.results.producer-b.>", "deliver_subject": a.NewInbox()}})
		resp, err = a.Request("$JS.API.CONSUMER.CREATE.EMBED_RESULTS.producer-a_r1.embed.results.producer-a.>", req, 5*time.Second)
		if err != nil || !strings.Contains(string(resp.Data), `"error"`) {
			t.Errorf("create with a filter mismatch: %v %v", err, resp)
		}
	})

	t.Run("jobs and requests into producer-b's space", func(t *testing.T) {
		jobs := []*nats.Msg{
			{Subject: "embed.jobs.producer-a.r.1", Header: hdr(), Data: jsonJob("doc-1", "x", "embed.results.producer-b.run.doc-1")},
			{Subject: "embed.jobs.producer-a.r.2", Header: hdr(schema.HeaderReply, "_INBOX_producer-b.x.y"), Data: jsonJob("doc-2", "x", "")},
			// Forged tenant and subject headers are the producer's word,
			// never the consumer's.
			{Subject: "embed.jobs.producer-a.r.3", Header: hdr("Embed-Tenant", "producer-b", "embed-tenant", "producer-b",
				"Embed-Subject", "embed.jobs.producer-b.run.doc-3"), Data: jsonJob("doc-3", "x", "embed.results.producer-b.run.doc-3")},
			// A tenant whose name starts like producer-b's, and prefix games.
			{Subject: "embed.jobs.producer-a.r.4", Header: hdr(), Data: jsonJob("doc-4", "x", "embed.results.producer-bx.doc-4")},
			{Subject: "embed.jobs.producer-a.r.5", Header: hdr(), Data: jsonJob("doc-5", "x", "_INBOX_producer-a")},
			{Subject: "embed.jobs.producer-a.r.6", Header: hdr(), Data: jsonJob("doc-6", "x", "embed.results.producer-a")},
			{Subject: "embed.jobs.producer-a.r.7", Header: hdr(), Data: jsonJob("doc-7", "x", "embed.v1.embed.producer-b")},
			{Subject: "embed.jobs.producer-a.r.8", Header: hdr(), Data: jsonJob("doc-8", "x", "$KV.EMBED_ENGINES.x.cpu.b1.s8192")},
			{Subject: "embed.jobs.producer-a.r.9", Header: hdr(), Data: jsonJob("doc-9", "x", "embed.jobs.producer-b.run.doc-9")},
		}
		for _, m := range jobs {
			if _, err := ajs.PublishMsg(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		// (A reply-to under $JS.ACK the server drops from any client.)
		for i, reply := range []string{"_INBOX_producer-b.guess.1", "embed.results.producer-b.viareq", "orders.create",
			"embed.v1.embed.producer-b", "_INBOX.x"} {
			if err := a.PublishMsg(&nats.Msg{Subject: "embed.v1.embed.producer-a", Reply: reply, Header: hdr(),
				Data: fmt.Appendf(nil, `{"id":"req-%d","texts":["x"]}`, i)}); err != nil {
				t.Fatal(err)
			}
		}
		r.settled(t, ctx)
		// The requests' replies are refused (bad_reply) in the one-account
		// layout; with tenants as accounts the server routes them back into
		// producer-a's own account, answered there: no dead letter.
		want := len(jobs)
		if conf != accountsConf {
			want += 5
		}
		for i := range want {
			m, err := r.dlq.NextMsg(20 * time.Second)
			if err != nil {
				t.Fatalf("%d dead letters, want %d", i, want)
			}
			if m.Header.Get(jetstream.HeaderDLQCode) != "bad_reply" || m.Header.Values("Embed-Tenant")[0] != "producer-a" ||
				len(m.Header.Values("Embed-Tenant")) != 1 || m.Header.Get("embed-tenant") != "" {
				t.Errorf("dead letter %s %v: want bad_reply of producer-a only", m.Subject, m.Header)
			}
			if s := m.Header.Values(jetstream.HeaderSubject); len(s) != 1 || !strings.HasPrefix(s[0], "embed.") || strings.Contains(s[0], "producer-b") {
				t.Errorf("dead letter names subject %v", s)
			}
		}
	})

	t.Run("push consumer delivering elsewhere", func(t *testing.T) {
		// A result of producer-a's own, stored.
		ca, err := client.New(a.Conn, client.WithTenant("producer-a"), client.WithRun("deputy"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ca.Submit(ctx, schema.NewJob("d1", "a text")); err != nil {
			t.Fatal(err)
		}
		r.settled(t, ctx)
		// nats-server does not check a push consumer's deliver subject
		// (nats-server#8274): producer-a has copies of its own results
		// delivered where it may not publish. A push consumer delivers
		// only to a literal subscription of its deliver subject (wildcard
		// ones, such as the tenants' endpoint and the clients' inboxes,
		// do not count): where nobody listens literally nothing happens;
		// the service's bare endpoint is such a listener.
		listening, err := b.SubscribeSync("_INBOX_producer-b.deputy")
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Flush(); err != nil {
			t.Fatal(err)
		}
		for i, c := range []struct{ deliver, group string }{
			{"embed.jobs.producer-b.run.doc-1", ""}, {"$KV.EMBED_ENGINES.bge-m3_x.cpu.b1.s8192", ""},
			{"embed.v1.embed.producer-b", ""}, {"embed.v1.embed.producer-b", "embed"}, {"embed.v1.embed", "embed"},
			{"_INBOX_producer-b.deputy", ""}, {"embed.results.producer-b.run.doc-1", ""},
		} {
			short, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := ajs.CreatePushConsumer(short, "EMBED_RESULTS", natsjs.ConsumerConfig{Name: fmt.Sprintf("deputy%d", i),
				FilterSubject: "embed.results.producer-a.deputy.>", DeliverSubject: c.deliver, DeliverGroup: c.group, AckPolicy: natsjs.AckNonePolicy})
			cancel()
			t.Logf("push consumer delivering to %s (group %q): %v", c.deliver, c.group, err)
		}
		time.Sleep(time.Second)
		if m, err := listening.NextMsg(time.Second); err == nil {
			t.Logf("residual (nats-server#8274): a subject producer-b listens on literally received producer-a's own result (%d bytes)", len(m.Data))
		}
		for i := range 6 {
			if c, err := r.pjs.PushConsumer(ctx, "EMBED_RESULTS", fmt.Sprintf("deputy%d", i)); err == nil {
				info, _ := c.Info(ctx)
				t.Logf("deputy%d: delivered %d, pending %d", i, info.Delivered.Consumer, info.NumPending)
			}
		}
		st, err := r.pjs.Stream(ctx, "EMBED_JOBS")
		if err != nil {
			t.Fatal(err)
		}
		if info, err := st.Info(ctx); err != nil || info.State.Msgs != 0 {
			t.Errorf("jobs stream after the push: %+v, %v", info.State, err)
		}
		kv, err := r.pjs.KeyValue(ctx, "EMBED_ENGINES")
		if err != nil {
			t.Fatal(err)
		}
		if e, err := kv.Get(ctx, "bge-m3_x.cpu.b1.s8192"); err == nil {
			t.Errorf("a result reached the engines bucket: %q", e.Value())
		}
		// What reached the service is not a job of producer-b's: it is
		// dead-lettered, nothing is answered, nothing is stored.
		for {
			m, err := r.dlq.NextMsg(2 * time.Second)
			if err != nil {
				break
			}
			t.Logf("dead letter from the push: %s code %s tenant %s reply-to refused: %s", m.Subject,
				m.Header.Get(jetstream.HeaderDLQCode), m.Header.Get("Embed-Tenant"), m.Header.Get(jetstream.HeaderDLQMessage))
		}
		if got := r.stored(t, ctx, "embed.results.producer-b.>"); len(got) != 0 {
			t.Errorf("results stored under producer-b: %v", got)
		}
	})

	t.Run("nothing reached producer-b", func(t *testing.T) {
		select {
		case subj := <-caught:
			t.Fatalf("producer-b received %s", subj)
		case <-time.After(time.Second):
		}
	})

	t.Run("producer-b's own job still runs, once", func(t *testing.T) {
		cb, err := client.New(b.Conn, client.WithTenant("producer-b"), client.WithRun("run"))
		if err != nil {
			t.Fatal(err)
		}
		// producer-a published on its own subject with b's run and id, and
		// sent b's old-style dedupe id: neither is b's job's subject.
		if _, err := ajs.PublishMsg(ctx, &nats.Msg{Subject: "embed.jobs.producer-a.run.doc-1",
			Header: hdr(schema.HeaderMsgID, "doc-1"), Data: jsonJob("doc-1", "x", "embed.results.producer-a.run.doc-1")}); err != nil {
			t.Fatal(err)
		}
		ack, err := cb.Submit(ctx, schema.NewJob("doc-1", "the text of producer-b"))
		if err != nil || ack.Duplicate {
			t.Fatalf("producer-b's submit: %+v, %v", ack, err)
		}
		n := 0
		for sr, err := range cb.Results(ctx, "run", client.UntilCaughtUp()) {
			if err != nil {
				t.Fatal(err)
			}
			n++
			if sr.ID != "doc-1" || len(sr.Items) != 1 || sr.Subject != cb.ReplySubject("doc-1") {
				t.Errorf("producer-b read %+v on %s", sr.Result, sr.Subject)
			}
		}
		if n == 0 {
			// Not stored yet when Results began: read it live.
			natsWaitResult(t, ctx, cb)
		}
	})
}

// natsWaitResult reads run "run" until its first result.
func natsWaitResult(t *testing.T, ctx context.Context, c *client.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for sr, err := range c.Results(ctx, "run") {
		if err != nil {
			t.Fatal(err)
		}
		if sr.ID != "doc-1" || len(sr.Items) != 1 {
			t.Errorf("producer-b read %+v", sr.Result)
		}
		return
	}
}
