package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// steppedEmbedder embeds nothing real: each call waits for a token from
// step (or the end of the test), so the test decides when a job ends.
func steppedEmbedder(t *testing.T, step <-chan struct{}) engine.Embedder {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	return engine.EmbedderFunc(func(ctx context.Context, texts []engine.Text, _ engine.Call) ([]engine.Embedding, engine.CallReport, error) {
		select {
		case <-step:
		case <-done:
		case <-ctx.Done():
			return nil, engine.CallReport{}, ctx.Err()
		}
		out := make([]engine.Embedding, len(texts))
		for i := range out {
			out[i] = engine.Embedding{Dense: []float32{1}, Tokens: 1}
		}
		return out, engine.CallReport{Tokens: len(texts)}, nil
	})
}

// intake records the tenants of the deliveries the job loop takes, in
// order.
type intake struct {
	mu    sync.Mutex
	order []string
}

func (in *intake) sink(c *consumer.Loop) jetstream.Sink {
	return sinkFunc(func(ctx context.Context, d consumer.Delivery) error {
		if st, ok := d.(*consumer.Stored); ok {
			in.mu.Lock()
			in.order = append(in.order, schema.SubjectToken(st.Subject, 3))
			in.mu.Unlock()
		}
		return c.Submit(ctx, d)
	})
}

func (in *intake) snapshot() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]string(nil), in.order...)
}

func publishJobs(t *testing.T, srv *server, tenant string, n int, text string) {
	t.Helper()
	for i := range n {
		j := schema.NewJob(fmt.Sprintf("%s-%04d", tenant, i), text)
		j.Reply = "embed.results." + tenant + ".r"
		data, err := schema.EncodeJob(j, schema.EncodingMsgpack)
		if err != nil {
			t.Fatal(err)
		}
		publishRaw(t, srv.js, "embed.jobs."+tenant+".run."+j.ID, nil, data)
	}
}

func startFairWorker(t *testing.T, srv *server, emb engine.Embedder, in *intake, shares jetstream.Shares, pull ...jetstream.PullOption) *jetstream.Worker {
	t.Helper()
	return runWorker(t, srv, jetstream.WorkerConfig{
		Embedder: emb, Sink: in.sink, Refresh: 50 * time.Millisecond, PrefetchMax: 64, Pull: pull,
		Fair: jetstream.FairConfig{Shares: shares, Scan: 100 * time.Millisecond},
	})
}

func perTenant(c *jetstream.Config) { c.Consumer.PerTenant = true }

// TestFairPullNewTenantNotBehindBacklog: tenant a has 300 jobs queued and
// the job loop is full; tenant b's one job, published then, gets a
// consumer of its own and enters the job loop at most two deliveries
// after it was published (the one a had in hand, and at most one more),
// not behind a's prefetch buffer or queue.
func TestFairPullNewTenantNotBehindBacklog(t *testing.T) {
	srv := newServer(t, perTenant)
	step := make(chan struct{})
	in := &intake{}
	publishJobs(t, srv, "a", 300, "a text")
	w := startFairWorker(t, srv, steppedEmbedder(t, step), in, jetstream.Shares{})
	// The loop holds one job (its budget) and a's buffer is full.
	natstest.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if n := len(in.snapshot()); n < 1 {
			return fmt.Errorf("%d jobs taken", n)
		}
		return nil
	})
	publishJobs(t, srv, "b", 1, "b text")
	natstest.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if ts := w.Tenants(); len(ts) != 2 {
			return fmt.Errorf("tenants %v", ts)
		}
		return nil
	})
	// b's loop has its job (a pull request was waiting for it).
	natstest.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		jc, err := srv.js.Consumer(context.Background(), srv.cfg.Jobs.Name, jetstream.TenantConsumerName(srv.cfg.Consumer.Name, "b"))
		if err != nil {
			return err
		}
		if jc.CachedInfo().NumAckPending < 1 {
			return fmt.Errorf("b's job not fetched")
		}
		return nil
	})
	before := len(in.snapshot())
	// Jobs end one at a time until b's is taken.
	for i := 0; ; i++ {
		order := in.snapshot()
		if idx := indexOf(order, "b"); idx >= 0 {
			t.Logf("b's job taken %d deliveries after it was published (a had %d taken before; 300 queued)", idx-before+1, before)
			if idx-before+1 > 2 {
				t.Fatalf("b's job taken as delivery %d after it was published: %v", idx-before+1, order)
			}
			break
		}
		if i > 20 {
			t.Fatalf("b's job not taken after %d jobs: %v", i, order)
		}
		step <- struct{}{}
		natstest.CheckFor(t, 10*time.Second, time.Millisecond, func() error {
			if len(in.snapshot()) <= len(order) {
				return fmt.Errorf("no new intake")
			}
			return nil
		})
	}
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// TestFairPullWeights: tenants a (weight 3) and b (weight 1) both
// backlogged with jobs of one size: the job loop takes them 3:1 (+-10%).
func TestFairPullWeights(t *testing.T) {
	srv := newServer(t, perTenant)
	step := make(chan struct{})
	in := &intake{}
	text := strings.Repeat("same size ", 10)
	publishJobs(t, srv, "a", 150, text)
	publishJobs(t, srv, "b", 150, text)
	shares := jetstream.Shares{Weights: map[string]int{"a": 3, "b": 1}}
	// A prefetch that does not run dry between two jobs, as with a real
	// engine (these jobs take no time: the test steps them as fast as it
	// can).
	w := startFairWorker(t, srv, steppedEmbedder(t, step), in, shares, jetstream.PrefetchLimits(64, 64))
	// Both tenants' loops have jobs buffered before the first ends.
	natstest.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if n := len(in.snapshot()); n < 1 {
			return fmt.Errorf("%d jobs taken", n)
		}
		return nil
	})
	// A job ends only when both tenants have a job before the gate (one
	// waiting in it, or more buffered behind the one in hand), as with an
	// engine slower than a pull request: these jobs take no time
	// otherwise, and a pull request late on a loaded machine would look
	// like a tenant with nothing to do. (The server's count of fetched
	// jobs is not that: it counts jobs still on their way to the buffer,
	// and once let a 12-turn dry spell of a through, 87:33.)
	ready := func() error {
		if !w.TenantsReady("a", "b") {
			return errors.New("a tenant has no job before the gate")
		}
		return nil
	}
	const n = 120
	for len(in.snapshot()) < n {
		natstest.CheckFor(t, 10*time.Second, time.Millisecond, ready)
		step <- struct{}{}
	}
	counts := map[string]int{}
	for _, tn := range in.snapshot()[:n] {
		counts[tn]++
	}
	ratio := float64(counts["a"]) / float64(max(counts["b"], 1))
	t.Logf("first %d jobs: a %d, b %d (ratio %.2f, want 3): %s", n, counts["a"], counts["b"], ratio, strings.Join(in.snapshot()[:n], ""))
	if ratio < 2.7 || ratio > 3.3 {
		t.Fatalf("a:b = %d:%d, want 3:1 +-10%%", counts["a"], counts["b"])
	}
}

// TestQuotaHoldsJobsInStream: tenant a's quota (60 tokens a minute) lets
// one of its jobs in (about 100 estimated tokens) and then holds the rest:
// they wait in the stream, neither NAKed nor redelivered (no walk to
// MaxDeliver), while
// tenant b, without a quota, is served whole.
func TestQuotaHoldsJobsInStream(t *testing.T) {
	srv := newServer(t, perTenant)
	step := make(chan struct{})
	close(step) // every job ends at once
	in := &intake{}
	text := strings.Repeat("quota text ", 36) // ~400 bytes: ~100 tokens
	publishJobs(t, srv, "a", 10, text)
	publishJobs(t, srv, "b", 5, text)
	shares := jetstream.Shares{Quotas: map[string]jetstream.Quota{"a": {TokensPerMinute: 60}}}
	startFairWorker(t, srv, steppedEmbedder(t, step), in, shares)
	ctx := context.Background()
	natstest.CheckFor(t, 20*time.Second, 10*time.Millisecond, func() error {
		order := in.snapshot()
		counts := map[string]int{}
		for _, tn := range order {
			counts[tn]++
		}
		if counts["b"] < 5 || counts["a"] < 1 {
			return fmt.Errorf("taken %v", counts)
		}
		return nil
	})
	counts := map[string]int{}
	for _, tn := range in.snapshot() {
		counts[tn]++
	}
	if counts["a"] != 1 {
		t.Fatalf("a over its quota had %d jobs taken, want 1", counts["a"])
	}
	jc, err := srv.js.Consumer(ctx, srv.cfg.Jobs.Name, jetstream.TenantConsumerName(srv.cfg.Consumer.Name, "a"))
	if err != nil {
		t.Fatal(err)
	}
	info := jc.CachedInfo()
	t.Logf("a: %d pending in the stream, %d fetched and held unsettled (heartbeated), %d redelivered", info.NumPending, info.NumAckPending, info.NumRedelivered)
	// A tenant with a quota pulls one job at a time: at most one is held
	// here beyond its quota, the rest wait in the stream.
	if info.NumRedelivered != 0 || info.NumPending+uint64(info.NumAckPending) != 9 || info.NumPending < 8 {
		t.Fatalf("a's held jobs: %d pending, %d fetched, %d redelivered; want 9 waiting, at least 8 in the stream, none redelivered",
			info.NumPending, info.NumAckPending, info.NumRedelivered)
	}
}

// TestQuotaRefusesRequests: a request of a tenant over its quota is
// answered quota_exceeded, retriable, with a retry-after; another tenant's
// is answered.
func TestQuotaRefusesRequests(t *testing.T) {
	srv := newServer(t, perTenant)
	step := make(chan struct{})
	close(step)
	shares := jetstream.Shares{Quotas: map[string]jetstream.Quota{"a": {TokensPerMinute: 60}}}
	startFairWorker(t, srv, steppedEmbedder(t, step), &intake{}, shares)
	request := func(tenant string) error {
		nc, err := nats.Connect(srv.url, nats.CustomInboxPrefix("_INBOX_"+tenant))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		c, err := client.New(nc, client.WithTenant(tenant))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = c.Embed(ctx, strings.Repeat("quota text ", 36))
		return err
	}
	if err := request("a"); err != nil {
		t.Fatalf("a's first request: %v", err)
	}
	err := request("a")
	var se *schema.Error
	if !errors.As(err, &se) || se.Code != schema.CodeQuotaExceeded || !se.Retriable || se.RetryAfterMS < 1000 {
		t.Fatalf("a's second request: %v (%+v), want quota_exceeded, retriable, retry after about 40 s", err, se)
	}
	t.Logf("a over quota: %v (retry after %d ms)", se, se.RetryAfterMS)
	if err := request("b"); err != nil {
		t.Fatalf("b's request: %v", err)
	}
}

// TestProvisionPerTenantAndBack: provision --per-tenant makes the durable
// the template (filtered on the bare prefix, max-delivery advisories of
// every consumer captured); provision without it deletes the tenants'
// consumers and makes it the catch-all again.
func TestProvisionPerTenantAndBack(t *testing.T) {
	srv := newServer(t, perTenant)
	ctx := context.Background()
	jc, err := srv.js.Consumer(ctx, srv.cfg.Jobs.Name, srv.cfg.Consumer.Name)
	if err != nil {
		t.Fatal(err)
	}
	if f := jc.CachedInfo().Config.FilterSubject; f != "embed.jobs" {
		t.Fatalf("template filter %q, want embed.jobs", f)
	}
	name := jetstream.TenantConsumerName(srv.cfg.Consumer.Name, "a")
	if _, err := srv.js.CreateConsumer(ctx, srv.cfg.Jobs.Name, natsjs.ConsumerConfig{Durable: name, AckPolicy: natsjs.AckExplicitPolicy,
		FilterSubjects: []string{"embed.jobs.a", "embed.jobs.a.>"}, Metadata: map[string]string{jetstream.MetaTemplate: srv.cfg.Consumer.Name, jetstream.MetaTenant: "a"}}); err != nil {
		t.Fatal(err)
	}
	back := srv.cfg
	back.Consumer.PerTenant = false
	if _, err := jetstream.Provision(ctx, srv.js, back, jetstream.AllowDowngrade()); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.js.Consumer(ctx, srv.cfg.Jobs.Name, name); !errors.Is(err, natsjs.ErrConsumerNotFound) {
		t.Fatalf("tenant's consumer after provision without per-tenant: %v, want deleted", err)
	}
	if jc, err = srv.js.Consumer(ctx, srv.cfg.Jobs.Name, srv.cfg.Consumer.Name); err != nil || jc.CachedInfo().Config.FilterSubject != "" {
		t.Fatalf("durable after provision without per-tenant: %v, want the catch-all", err)
	}
}

// TestMemberCheckTakesPerTenantFromServer: a member checks the server's
// objects with its own flags, which do not say per-tenant (the provision
// Job does); it takes the mode from the template, as it takes the
// consumer's tuning, and so finds no drift in the dead-letter stream's
// advisory subject (every tenant's consumer's) or anywhere else.
func TestMemberCheckTakesPerTenantFromServer(t *testing.T) {
	srv := newServer(t, perTenant)
	member := srv.cfg
	member.Consumer.PerTenant = false
	r, err := jetstream.Provision(context.Background(), srv.js, member, jetstream.WithMode(jetstream.ModeCheck), jetstream.ServerTuning())
	if err != nil {
		t.Fatalf("member's check of a per-tenant server: %v", err)
	}
	for _, o := range r.Outcomes {
		if o.Action != jetstream.Unchanged {
			t.Errorf("%s %s: %v %v, want unchanged", o.Kind, o.Name, o.Action, o.Fields())
		}
	}
}

// TestFairPullInvalidTenantToken: with per-tenant consumers, a job whose
// subject's tenant token can be no tenant (over schema.MaxTenantBytes, or
// with a wildcard character inside) still gets a consumer, so the job loop
// refuses it bad_reply (a dead letter) instead of it waiting in the work
// queue unpulled, unanswered and unlogged; a good tenant's job beside it
// is answered.
func TestFairPullInvalidTenantToken(t *testing.T) {
	srv := newServer(t, perTenant)
	e := openEngine(t, engine.Config{})
	w := runWorker(t, srv, jetstream.WorkerConfig{
		Embedder: e, Refresh: 50 * time.Millisecond, Fair: jetstream.FairConfig{Scan: 100 * time.Millisecond},
	})
	// A whole-token wildcard (a core publish without permissions stores
	// one) gets no consumer: its filter would take every tenant's jobs.
	// Its job stays in the queue; nobody else's is taken by it.
	wild := connect(t, srv.url)
	if err := wild.PublishMsg(&nats.Msg{Subject: "embed.jobs.*.run.w", Header: nats.Header(withJSON(map[string][]string{})), Data: []byte(`{"id":"w","texts":["x"]}`)}); err != nil {
		t.Fatal(err)
	}
	if err := wild.Flush(); err != nil {
		t.Fatal(err)
	}
	// Give the member a few scans (100 ms) with the wildcard's job alone:
	// a consumer of "*" made now would take the jobs below. (Shorter
	// only makes the test see less; what it asserts holds either way.)
	time.Sleep(500 * time.Millisecond)
	for i, tenant := range []string{strings.Repeat("t", schema.MaxTenantBytes+1), "a*b"} {
		publishRaw(t, srv.js, "embed.jobs."+tenant+".run.bad", withJSON(map[string][]string{}), fmt.Appendf(nil, `{"id":"bad%d","texts":["x"]}`, i))
	}
	publishJobs(t, srv, "good", 1, "good text")
	natstest.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		if n := natstest.StreamCount(t, srv.js, srv.cfg.DLQ.Name); n != 2 {
			return fmt.Errorf("%d dead letters, want 2", n)
		}
		if n := natstest.StreamCount(t, srv.js, srv.cfg.Jobs.Name); n != 1 {
			return fmt.Errorf("%d jobs left in the work queue, want the wildcard's", n)
		}
		if n := natstest.StreamCount(t, srv.js, srv.cfg.Results.Name); n != 1 {
			return fmt.Errorf("%d results, want the good job's", n)
		}
		return nil
	})
	for _, m := range natstest.StreamMsgs(t, srv.js, srv.cfg.DLQ.Name, "") {
		if code := m.Headers().Get(jetstream.HeaderDLQCode); code != string(schema.CodeBadReply) {
			t.Errorf("dead letter code %q, want bad_reply", code)
		}
	}
	if slices.Contains(w.Tenants(), "*") {
		t.Errorf("tenants %q: a consumer of the wildcard token", w.Tenants())
	}
}

// TestFairPullMaxTenants: a producer that mints a tenant a subject (no
// permissions stop it) does not get a consumer each: the consumers of
// tenants the shares do not name stay within MaxTenants for the whole run
// (counted from the server's create and delete advisories, in the order
// it sent them), a named tenant gets its consumer beside them, and every
// job is answered: the waiting tenants get the slots as the empty
// consumers retire.
func TestFairPullMaxTenants(t *testing.T) {
	srv := newServer(t, perTenant)
	const maxTenants, tenants, jobs = 3, 12, 2
	made := watchConsumers(t, srv, func(name string) bool { return strings.HasSuffix(name, "_named") })

	e := openEngine(t, engine.Config{})
	runWorker(t, srv, jetstream.WorkerConfig{
		Embedder: e, Refresh: 50 * time.Millisecond,
		Fair: jetstream.FairConfig{Scan: 100 * time.Millisecond, MaxTenants: maxTenants,
			Shares: jetstream.Shares{Weights: map[string]int{"named": 2}}},
	})
	for i := range tenants {
		publishJobs(t, srv, fmt.Sprintf("minted%02d", i), jobs, "a text")
	}
	publishJobs(t, srv, "named", 1, "a text")
	natstest.CheckFor(t, 60*time.Second, 50*time.Millisecond, func() error {
		if n := natstest.StreamCount(t, srv.js, srv.cfg.Results.Name); n != tenants*jobs+1 {
			return fmt.Errorf("%d results of %d", n, tenants*jobs+1)
		}
		return nil
	})
	most, created := made.counts()
	t.Logf("unnamed tenants' consumers: at most %d at once, %d made in all", most, created)
	if most > maxTenants {
		t.Errorf("%d consumers of unnamed tenants at once, want at most %d", most, maxTenants)
	}
	if created < tenants {
		t.Errorf("%d consumers made for %d tenants with jobs", created, tenants)
	}
}

// consumerWatch counts the consumers of the jobs stream the server says it
// made and deleted (its advisories, in the order it sent them), the
// stream's shared consumer and those skip names left out: how many lived
// at once at the most, and how many were made.
type consumerWatch struct {
	mu            sync.Mutex
	live          map[string]bool
	most, created int
}

func watchConsumers(t *testing.T, srv *server, skip func(name string) bool) *consumerWatch {
	t.Helper()
	cw := &consumerWatch{live: map[string]bool{}}
	watch := connect(t, srv.url)
	sub, err := watch.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.*."+srv.cfg.Jobs.Name+".*", func(m *nats.Msg) {
		tok := strings.Split(m.Subject, ".")
		name := tok[len(tok)-1]
		if name == srv.cfg.Consumer.Name || skip != nil && skip(name) {
			return
		}
		cw.mu.Lock()
		defer cw.mu.Unlock()
		switch tok[4] {
		case "CREATED":
			cw.live[name] = true
			cw.created++
		case "DELETED":
			delete(cw.live, name)
		}
		cw.most = max(cw.most, len(cw.live))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return cw
}

func (cw *consumerWatch) counts() (most, created int) {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return cw.most, cw.created
}
