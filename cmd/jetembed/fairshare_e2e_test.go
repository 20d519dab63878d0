package main

// End-to-end proofs of the fair share of per-tenant consumers (issue 32)
// through a real nats-server loaded with the shipped
// deploy/nats/accounts.conf: `jetembed provision --per-tenant` as
// `provisioner`, serve as `embedder` (tiny model, real ONNX Runtime), the
// tenants producer-a and producer-b as their own users. Order is read from
// the results stream's sequence numbers, never from the clock.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/schema"
)

// fairInFlight is serve's bulk budget in these tests: a few dozen of their
// jobs. The fair share measured here is the pulling's: what the job loop
// holds already runs in the engine's order.
const fairInFlight = "512"

// newFairRig is newTenancyRig with per-tenant consumers and serve's
// extra flags.
func newFairRig(t *testing.T, ctx context.Context, serveArgs ...string) *tenancyRig {
	t.Helper()
	r := &tenancyRig{}
	r.url, r.caFile = runTenancyServer(t)
	if code, out, errOut := runCmd(t, ctx, append([]string{"provision", "--per-tenant"}, r.as(t, "provisioner")...)...); code != 0 {
		t.Fatalf("provision --per-tenant as provisioner: exit %d: %s%s", code, out, errOut)
	}
	args := append(r.as(t, "embedder"), "--provision=off", "--http", "", "--fleet-poll", "200ms", "--in-flight-tokens", fairInFlight)
	r.s = startOps(t, r.url, append(args, serveArgs...)...)
	r.s.waitReady(t)
	nc, err := nats.Connect(r.url, nats.RootCAs(r.caFile), nats.UserInfo("provisioner", opsPassword("provisioner")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	r.prov = nc
	if r.pjs, err = natsjs.New(nc); err != nil {
		t.Fatal(err)
	}
	return r
}

// lastResultSeq is the last sequence of the results stream.
func (r *tenancyRig) lastResultSeq(t *testing.T, ctx context.Context) uint64 {
	t.Helper()
	st, err := r.pjs.Stream(ctx, "EMBED_RESULTS")
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().State.LastSeq
}

// resultSeq waits for the stored result on subject and returns its
// sequence in the results stream.
func (r *tenancyRig) resultSeq(t *testing.T, ctx context.Context, subject string, within time.Duration) uint64 {
	t.Helper()
	var seq uint64
	natstest.CheckFor(t, within, 5*time.Millisecond, func() error {
		st, err := r.pjs.Stream(ctx, "EMBED_RESULTS")
		if err != nil {
			return err
		}
		m, err := st.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			return fmt.Errorf("%s: %w", subject, err)
		}
		seq = m.Sequence
		return nil
	})
	return seq
}

// publishBacklog publishes n one-text jobs of tenant p on its own
// subjects, replies in its results, and waits for the stream's acks.
func publishBacklog(t *testing.T, ctx context.Context, p *producer, tenant, run string, n int, text string) {
	t.Helper()
	js, err := natsjs.New(p.Conn)
	if err != nil {
		t.Fatal(err)
	}
	hdr := nats.Header{schema.HeaderContentType: {schema.MediaTypeJSON}}
	for i := range n {
		data := fmt.Appendf(nil, `{"id":"%s%d","texts":[%q],"reply":"embed.results.%s.%s.%d"}`, run, i, text, tenant, run, i)
		if _, err := js.PublishMsgAsync(&nats.Msg{Subject: fmt.Sprintf("embed.jobs.%s.%s.%d", tenant, run, i), Header: hdr, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("backlog not published")
	}
}

// TestFairShareNewTenantUnderBacklog: producer-b's one job, published
// while producer-a has 2,000 queued, is answered before all but a few
// dozen of producer-a's (the jobs serve's budget held already, and the
// chunks in the engine), where one consumer of every job answers it after
// the thousand or so its prefetch holds (TestAttackBulkBacklogStarvesOthers
// logs that figure).
func TestFairShareNewTenantUnderBacklog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	r := newFairRig(t, ctx)
	a := connectProducer(t, r.url, r.caFile, "producer-a")
	b := connectProducer(t, r.url, r.caFile, "producer-b")
	cb, err := client.New(b.Conn, client.WithTenant("producer-b"), client.WithRun("run"))
	if err != nil {
		t.Fatal(err)
	}
	submitB := func(id string) (seq uint64, took time.Duration) {
		start := time.Now()
		if _, err := cb.Submit(ctx, schema.NewJob(id, "producer-b's one text")); err != nil {
			t.Fatal(err)
		}
		seq = r.resultSeq(t, ctx, "embed.results.producer-b.run."+id, 120*time.Second)
		return seq, time.Since(start)
	}
	// b's first job makes its consumer; the second is the idle latency.
	_, first := submitB("warm")
	_, idle := submitB("idle")
	const backlog = 2000
	start := r.lastResultSeq(t, ctx)
	began := time.Now()
	publishBacklog(t, ctx, a, "producer-a", "flood", backlog, "producer-a's backlog, one text a job")
	// producer-a's backlog is being served.
	natstest.CheckFor(t, 60*time.Second, 5*time.Millisecond, func() error {
		if n := r.lastResultSeq(t, ctx) - start; n < 50 {
			return fmt.Errorf("%d of producer-a's results", n)
		}
		return nil
	})
	atPublish := r.lastResultSeq(t, ctx) - start
	elapsed := time.Since(began)
	seq, took := submitB("under-backlog")
	before := seq - start - 1 // producer-a's results stored before b's
	perJob := elapsed / time.Duration(atPublish)
	t.Logf("producer-b's job under producer-a's backlog of %d: answered after %d of producer-a's results, %d of them after it was published; "+
		"latency %v (idle %v, first job with its consumer made %v; producer-a's jobs took %v each at the backlog's rate, so b waited about %.0f of them)",
		backlog, before, before-atPublish, took.Round(time.Millisecond), idle.Round(time.Millisecond), first.Round(time.Millisecond),
		perJob.Round(time.Microsecond), float64(took-idle)/float64(perJob))
	// The budget holds about 512 / 16 tokens = 32 of these jobs; a job
	// waits for those, then for its turn at the gate (at most two).
	if after := before - atPublish; after > 150 {
		t.Fatalf("producer-b's job answered after %d of producer-a's results stored since it was published, want at most 150 (serve's budget and a turn)", after)
	}
	if before >= backlog {
		t.Fatalf("producer-b's job waited for producer-a's whole backlog")
	}
}

// TestFairShareWeights: producer-a (weight 3) and producer-b (weight 1),
// both backlogged with jobs of one text of one size: of the results stored
// while both wait, producer-a has three for every one of producer-b's
// (+-10%), counted in the results stream's order.
func TestFairShareWeights(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	r := newFairRig(t, ctx, "--tenant-weight", "producer-a=3,producer-b=1")
	a := connectProducer(t, r.url, r.caFile, "producer-a")
	b := connectProducer(t, r.url, r.caFile, "producer-b")
	// Jobs long enough that the engine, not the pulling, is the bottleneck
	// (a fair share is a share of something scarce).
	text := strings.Repeat("same size text ", 60)
	start := r.lastResultSeq(t, ctx)
	const n = 800
	publishBacklog(t, ctx, a, "producer-a", "wa", n, text)
	publishBacklog(t, ctx, b, "producer-b", "wb", n, text)
	// 400 results after both tenants' consumers are pulling.
	first := r.resultSeq(t, ctx, "embed.results.producer-b.wb.0", 120*time.Second)
	natstest.CheckFor(t, 120*time.Second, 20*time.Millisecond, func() error {
		if last := r.lastResultSeq(t, ctx); last < first+400 {
			return fmt.Errorf("%d results since producer-b's first", last-first)
		}
		return nil
	})
	st, err := r.pjs.Stream(ctx, "EMBED_RESULTS")
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for seq := first + 1; seq <= first+400; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		counts[schema.SubjectToken(m.Subject, 3)]++
	}
	ratio := float64(counts["producer-a"]) / float64(max(counts["producer-b"], 1))
	t.Logf("400 results after producer-b's first (results %d to %d since the start): producer-a %d, producer-b %d, ratio %.2f (want 3 +-10%%)",
		first-start+1, first-start+400, counts["producer-a"], counts["producer-b"], ratio)
	if ratio < 2.7 || ratio > 3.3 {
		t.Fatalf("producer-a:producer-b = %d:%d, want 3:1 +-10%%", counts["producer-a"], counts["producer-b"])
	}
}
