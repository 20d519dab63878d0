package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/internal/telemetry"
	"github.com/jetembed/jetembed/internal/testkit"
	"github.com/jetembed/jetembed/schema"
)

// fakeUsage is a usage store that drops an event whose key it has, as the
// usage stream does in its duplicate window; fail injects errors.
type fakeUsage struct {
	mu     sync.Mutex
	keys   []string
	events []schema.UsageEvent
	dups   int
	fail   error
	pub    *fakePub // "usage" is added to its events, to check the order
}

func (u *fakeUsage) RecordUsage(_ context.Context, key string, e schema.UsageEvent) (bool, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.fail != nil {
		return false, u.fail
	}
	// The stream's store encodes the event, and refuses what the schema
	// refuses.
	if _, err := schema.EncodeUsageEvent(e); err != nil {
		return false, err
	}
	if key != "" && slices.Contains(u.keys, key) {
		u.dups++
		return true, nil
	}
	u.keys = append(u.keys, key)
	u.events = append(u.events, e)
	if u.pub != nil {
		u.pub.mu.Lock()
		u.pub.events = append(u.pub.events, "usage")
		u.pub.mu.Unlock()
	}
	return false, nil
}

func (u *fakeUsage) stored() ([]string, []schema.UsageEvent) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.keys), slices.Clone(u.events)
}

// The fake metrics count usage too: "usage <tenant> <code>" jobs,
// "usage tokens <tenant>" and "unrecorded <result>".
func (m *fakeMetrics) TenantUsage(_ context.Context, u telemetry.Usage) {
	m.add(fmt.Sprintf("usage %s %s", u.Tenant, u.Code), 1)
	m.add("usage tokens "+u.Tenant, int(u.Tokens))
	m.add("usage texts "+u.Tenant, int(u.Texts))
}

func (m *fakeMetrics) UsageUnrecorded(_ context.Context, result string) {
	m.add("unrecorded "+result, 1)
}

var _ UsageMetrics = (*fakeMetrics)(nil)

// stored is a delivery of j as a stream message: stream EMBED_JOBS,
// sequence seq, delivery n.
func stored(tb testing.TB, j *schema.Job, seq, n uint64) (*Stored, *fakeMsg) {
	d, m := delivery(tb, j, schema.EncodingJSON, n)
	d.Stream, d.Sequence, d.StoredAt = "EMBED_JOBS", seq, time.Unix(1700000000, 0)
	return d, m
}

func settleOne(tb testing.TB, r *rig, d Delivery, m *fakeMsg) []string {
	tb.Helper()
	if err := r.c.Submit(context.Background(), d); err != nil {
		tb.Fatal(err)
	}
	return m.wait(tb)
}

// TestUsageOncePerJob: a job settled for good is counted once, between its
// confirmed result and its ACK, under the tenant of its subject (never a
// header's); its redelivery (same stream sequence) is dropped by the store
// and not counted again in the metrics; the same body stored again is
// another job; a terminated job counts under its code; a NAKed one is not
// counted (it comes back).
func TestUsageOncePerJob(t *testing.T) {
	pub := &fakePub{}
	u := &fakeUsage{pub: pub}
	r := newRig(t, Config{Usage: u, Limits: schema.Limits{MaxTexts: 3}}, &fakeEmb{
		callErr: func(texts []engine.Text) error {
			if texts[0].Text == "busy" {
				return schema.Errorf(schema.CodeOverloaded, "busy")
			}
			return nil
		},
	}, pub)

	j := schema.NewJob("j1", "hello", "world!")
	j.Reply = "r.j1"
	d, m := stored(t, j, 7, 1)
	d.Header[schema.HeaderTenant] = []string{"evil"} // nothing vouches for a header
	if got := settleOne(t, r, d, m); !slices.Equal(got, []string{"ack"}) {
		t.Fatalf("calls %v, want [ack]", got)
	}
	if ev := pub.Events(); !slices.Equal(ev, []string{"result", "usage"}) {
		t.Errorf("events %v, want the result, then the usage (then the ACK)", ev)
	}
	keys, events := u.stored()
	tokens := int64(len("hello") + 2 + len("world!") + 2)
	if len(events) != 1 || keys[0] == "" || events[0].Tenant != testTenant || events[0].Texts != 2 || events[0].Tokens != tokens ||
		events[0].Code != "" || events[0].Job != "j1" || events[0].Request || events[0].Delivered != 1 || events[0].PaddedTokens < tokens {
		t.Fatalf("usage %q %+v, want one event of tenant %q, 2 texts, %d tokens", keys, events, testTenant, tokens)
	}

	// Redelivered (the ACK was lost): counted by the first delivery.
	d2, m2 := stored(t, j, 7, 2)
	settleOne(t, r, d2, m2)
	// The same body, published again: another job.
	d3, m3 := stored(t, j, 8, 1)
	settleOne(t, r, d3, m3)
	keys, events = u.stored()
	if len(events) != 2 || keys[0] == keys[1] || u.dups != 1 {
		t.Errorf("keys %q (%d dropped as duplicates): want the redelivery dropped, the job stored again counted", keys, u.dups)
	}
	if got := r.met.get("usage " + testTenant + " "); got != 2 {
		t.Errorf("metrics counted %d jobs, want 2 (the redelivery not again): %v", got, r.met)
	}
	if got := r.met.get("usage tokens " + testTenant); got != 2*int(tokens) {
		t.Errorf("metrics counted %d tokens, want %d", got, 2*tokens)
	}

	// Bad input: terminated, counted under its code.
	bad := schema.NewJob("j2", "a", "b", "c", "d")
	db, mb := stored(t, bad, 9, 1)
	if got := settleOne(t, r, db, mb); !slices.Equal(got, []string{"term"}) {
		t.Fatalf("calls %v, want [term]", got)
	}
	// A retriable refusal: NAKed, not counted.
	busy := schema.NewJob("j3", "busy")
	dn, mn := stored(t, busy, 10, 1)
	if got := settleOne(t, r, dn, mn); len(got) != 1 || got[0] != "nak+delay" {
		t.Fatalf("calls %v, want a NAK with delay", got)
	}
	_, events = u.stored()
	if len(events) != 3 || events[2].Code != schema.CodeTooManyTexts || events[2].Texts != 4 || events[2].Tokens != 0 {
		t.Errorf("events %+v: want the terminated job's last, too_many_texts, 4 texts, no tokens; none for the NAKed one", events)
	}
	if r.met.get("usage "+testTenant+" too_many_texts") != 1 || r.met.get("usage "+testTenant+" overloaded") != 0 {
		t.Errorf("metrics %v", r.met)
	}
}

// TestUsageStoreDown: a usage event the store does not take NAKs the job,
// so that it is counted when it runs again; on the final delivery the job
// is settled all the same and the loss counted; a request, which no
// redelivery follows, is answered and counted in the metrics.
func TestUsageStoreDown(t *testing.T) {
	u := &fakeUsage{fail: errors.New("usage stream unavailable")}
	r := newRig(t, Config{Usage: u, Delivery: DeliveryLimits{MaxDeliver: 3}}, nil, nil)
	j := schema.NewJob("j1", "hello")
	j.Reply = "r.j1"
	d, m := stored(t, j, 1, 1)
	if got := settleOne(t, r, d, m); len(got) != 1 || got[0] != "nak+delay" {
		t.Fatalf("calls %v, want a NAK with delay", got)
	}
	if r.met.get("unrecorded retried") != 1 || r.met.get("nak "+ReasonUsageFailed) != 1 || r.met.get("usage "+testTenant+" ") != 0 {
		t.Errorf("metrics %v", r.met)
	}
	d, m = stored(t, j, 1, 3)
	if got := settleOne(t, r, d, m); !slices.Equal(got, []string{"ack"}) {
		t.Fatalf("final delivery: calls %v, want [ack]", got)
	}
	if r.met.get("unrecorded lost") != 1 || r.met.get("usage "+testTenant+" ") != 1 {
		t.Errorf("metrics %v", r.met)
	}

	// A request: counted once, no key, marked a request.
	u.mu.Lock()
	u.fail = nil
	u.mu.Unlock()
	answered := make(chan struct{})
	data, _ := schema.EncodeJob(schema.NewJob("q1", "hi"), schema.EncodingJSON)
	err := r.c.Submit(context.Background(), &Request{
		Arrival: Arrival{Data: data, Header: map[string][]string{schema.HeaderContentType: {"application/json"}},
			Subject: "embed.v1.embed.acme", Received: time.Now()},
		Tenant: "acme", Reply: "_INBOX_acme.x",
		Respond: func(map[string][]string, []byte) error { close(answered); return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	<-answered
	testkit.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if _, ev := u.stored(); len(ev) != 1 {
			return fmt.Errorf("%d usage events", len(ev))
		}
		return nil
	})
	keys, events := u.stored()
	if keys[0] != "" || !events[0].Request || events[0].Tenant != "acme" || events[0].Tokens != 4 {
		t.Errorf("request usage %q %+v", keys, events)
	}
}

// TestUsageRefusedNotRetried: an event the usage schema refuses (here a
// store that says so; in the fleet an event no check lets through) is
// refused on every delivery, so the job is settled at once and the event
// counted lost: no NAK loop that runs the texts MaxDeliver times.
func TestUsageRefusedNotRetried(t *testing.T) {
	u := &fakeUsage{fail: fmt.Errorf("%w: tenant is not a tenant", schema.ErrUsageEvent)}
	r := newRig(t, Config{Usage: u, Delivery: DeliveryLimits{MaxDeliver: 5}}, nil, nil)
	j := schema.NewJob("j1", "hello")
	j.Reply = "r.j1"
	d, m := stored(t, j, 1, 1)
	if got := settleOne(t, r, d, m); !slices.Equal(got, []string{"ack"}) {
		t.Fatalf("calls %v, want [ack] on the first delivery", got)
	}
	if r.met.get("unrecorded lost") != 1 || r.met.get("unrecorded retried") != 0 || r.met.get("nak "+ReasonUsageFailed) != 0 {
		t.Errorf("metrics %v", r.met)
	}
}

// TestUsageCountsCachedTexts: a job answered from the fleet's cache is
// metered as the texts it is (its real tokens count, so a cache is no way
// around a quota or a bill), and its event says how many came from the
// cache: none ran, none padded.
func TestUsageCountsCachedTexts(t *testing.T) {
	u := &fakeUsage{}
	r := newRig(t, Config{Cache: newMemCache(), Usage: u}, nil, nil)
	texts := []string{"alpha", "beta", "beta"}
	for i, id := range []string{"first", "again"} {
		j := schema.NewJob(id, texts...)
		j.Reply = "r.x"
		d, m := stored(t, j, uint64(10+i), 1)
		if got := settleOne(t, r, d, m); !slices.Equal(got, []string{"ack"}) {
			t.Fatalf("%s: %v", id, got)
		}
	}
	_, events := u.stored()
	if len(events) != 2 {
		t.Fatalf("events %+v, want one a job", events)
	}
	first, again := events[0], events[1]
	if first.Tokens == 0 || again.Tokens != first.Tokens || again.Texts != 3 {
		t.Errorf("again counted %d texts, %d tokens; want 3 and the first run's %d", again.Texts, again.Tokens, first.Tokens)
	}
	// The first run ran "beta" once: its twin is no cache hit.
	if first.CachedTexts != 0 || again.CachedTexts != 3 || again.CachedTokens != first.Tokens || again.PaddedTokens != 0 {
		t.Errorf("cached %d texts, %d tokens, %d padded (first cached %d); want 3, %d, 0 (0)",
			again.CachedTexts, again.CachedTokens, again.PaddedTokens, first.CachedTexts, first.Tokens)
	}
}
