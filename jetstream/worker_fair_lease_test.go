package jetstream

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// leaseJS is the server as reconcile sees it: it records the consumers
// deleted, and has no consumer to pull from (a loop is not started).
type leaseJS struct {
	natsjs.JetStream
	mu      sync.Mutex
	deleted []string
}

func (j *leaseJS) DeleteConsumer(_ context.Context, _, name string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.deleted = append(j.deleted, name)
	return nil
}

func (j *leaseJS) Consumer(context.Context, string, string) (natsjs.Consumer, error) {
	return nil, errors.New("no server here")
}

// leaseRig is a member's per-tenant pull with a lease of idle and room
// for maxTenants unnamed tenants, on a server that records what it deletes.
func leaseRig(idle time.Duration, maxTenants int) (*tenantPull, *leaseJS) {
	js := &leaseJS{}
	w := &Worker{js: js, log: slog.New(slog.NewTextHandler(io.Discard, nil)), cfg: WorkerConfig{Config: DefaultConfig()}}
	return &tenantPull{w: w, gate: newFairGate(&takeSink{}, Shares{}, newQuotas(Shares{}, nil)), idle: idle, scan: time.Minute, max: maxTenants,
		loops: map[string]*tenantLoop{}, done: make(chan struct{})}, js
}

// TestFairPullLeaseOfANewConsumer: while tenants wait, a tenant's
// consumer is retired elsewhere (another member's lease of it ran out, or
// an operator deleted it) and made again (another member's scan gave the
// tenant a slot anew) between two of this member's lists, so this member
// keeps its old tenantLoop. The new consumer's lease starts now: the
// member must not retire it at once for the old consumer's lease
// (since, yielding). Before, the new consumer was deleted in the
// reconcile that first saw it.
func TestFairPullLeaseOfANewConsumer(t *testing.T) {
	const idle = time.Minute
	now := time.Now()
	tp, js := leaseRig(idle, 1)
	// The old consumer: this member has held it past its lease and yields it.
	tp.loops["hog"] = &tenantLoop{tenant: "hog", name: "embedder_hog", since: now.Add(-2 * idle), created: now.Add(-2 * idle), yielding: true}
	tp.waiting = 1
	// The consumer listed now is a new one, made a moment ago, with jobs
	// and nothing in flight yet.
	infos := map[string]*natsjs.ConsumerInfo{"hog": {Name: "embedder_hog", Created: now.Add(-time.Second), NumPending: 5}}
	tp.reconcile(context.Background(), infos, ServerSettings{}, false, now)
	js.mu.Lock()
	defer js.mu.Unlock()
	if len(js.deleted) > 0 {
		t.Errorf("deleted %q: a consumer made a second ago retired for the lease of the one before it", js.deleted)
	}
	// (Its loop is not started here: there is no server to pull from.)
	if tl := tp.loops["hog"]; tl == nil || now.Sub(tl.since) >= idle {
		t.Errorf("hog's loop %+v: want kept, its lease from now", tl)
	}
}

// TestFairPullLeaseOfTheSameConsumer: the consumer this member has held
// past its lease, listed again (same creation), is still retired once
// nothing of it is in flight while tenants wait.
func TestFairPullLeaseOfTheSameConsumer(t *testing.T) {
	const idle = time.Minute
	now := time.Now()
	tp, js := leaseRig(idle, 1)
	made := now.Add(-2 * idle)
	tp.loops["hog"] = &tenantLoop{tenant: "hog", name: "embedder_hog", since: made, created: made, yielding: true}
	tp.waiting = 1
	infos := map[string]*natsjs.ConsumerInfo{"hog": {Name: "embedder_hog", Created: made, NumPending: 5}}
	tp.reconcile(context.Background(), infos, ServerSettings{}, false, now)
	js.mu.Lock()
	defer js.mu.Unlock()
	if len(js.deleted) != 1 {
		t.Errorf("deleted %q, want hog's consumer: its lease is up and tenants wait", js.deleted)
	}
}

// TestFairPullLeaseYieldsAsManyAsWait: one tenant waiting for a slot
// makes one holder past its lease yield, the longest held, not every
// holder past it at once (each would give back its buffer and be made
// again).
func TestFairPullLeaseYieldsAsManyAsWait(t *testing.T) {
	const idle = time.Minute
	now := time.Now()
	tp, js := leaseRig(idle, 3)
	infos := map[string]*natsjs.ConsumerInfo{}
	for i, name := range []string{"a", "b", "c"} {
		made := now.Add(-time.Duration(5-i) * idle) // a held longest
		tp.loops[name] = &tenantLoop{tenant: name, name: "embedder_" + name, since: made, created: made}
		infos[name] = &natsjs.ConsumerInfo{Name: "embedder_" + name, Created: made, NumPending: 5}
	}
	tp.waiting = 1
	tp.reconcile(context.Background(), infos, ServerSettings{}, false, now)
	js.mu.Lock()
	defer js.mu.Unlock()
	if len(js.deleted) != 1 || js.deleted[0] != "embedder_a" {
		t.Errorf("deleted %q with one tenant waiting, want the longest held alone (embedder_a)", js.deleted)
	}
}

// TestFairPullLeaseTwoMembersAgree: two members pull from the same two
// unnamed consumers (the bound, 2), both held past their lease, with one
// tenant waiting. Each member made one of them in its own scan and saw
// the other's later (b the first only a moment ago: its lease there is up
// a refresh later), so their local first-seen times order the two the
// other way round. A consumer is retired only once nothing of it
// is in flight, that is once every member pulling it yields it. Before,
// each member yielded the consumer it had seen first and kept pulling the
// other: both stayed in flight for ever, neither was retired, and the
// waiting tenant never got a slot.
func TestFairPullLeaseTwoMembersAgree(t *testing.T) {
	const idle, refresh = time.Minute, 50 * time.Millisecond
	now := time.Now()
	js := &leaseJS{}
	w := &Worker{js: js, log: slog.New(slog.NewTextHandler(io.Discard, nil)), cfg: WorkerConfig{Config: DefaultConfig()}}
	member := func() *tenantPull {
		return &tenantPull{w: w, gate: newFairGate(&takeSink{}, Shares{}, newQuotas(Shares{}, nil)), idle: idle, scan: time.Minute, max: 2,
			loops: map[string]*tenantLoop{}, done: make(chan struct{}), waiting: 1}
	}
	// x made by member a, y a moment later by member b; each saw the
	// other's at its next list.
	madeX, madeY := now.Add(-2*idle), now.Add(-2*idle+10*time.Millisecond)
	a, b := member(), member()
	a.loops["x"] = &tenantLoop{tenant: "x", name: "embedder_x", since: madeX, created: madeX}
	a.loops["y"] = &tenantLoop{tenant: "y", name: "embedder_y", since: madeX.Add(refresh), created: madeY}
	b.loops["y"] = &tenantLoop{tenant: "y", name: "embedder_y", since: madeY, created: madeY}
	b.loops["x"] = &tenantLoop{tenant: "x", name: "embedder_x", since: now.Add(-idle + refresh), created: madeX}
	created := map[string]time.Time{"x": madeX, "y": madeY}
	members := []*tenantPull{a, b}
	for round := range 5 {
		// The server's view: a consumer has jobs in flight while a member
		// pulls it (its loop not yielding).
		for _, m := range members {
			infos := map[string]*natsjs.ConsumerInfo{}
			for tenant, made := range created {
				pulling := 0
				for _, o := range members {
					if tl := o.loops[tenant]; tl != nil && !tl.yielding {
						pulling++
					}
				}
				infos[tenant] = &natsjs.ConsumerInfo{Name: "embedder_" + tenant, Created: made, NumPending: 100, NumAckPending: pulling,
					Config: natsjs.ConsumerConfig{AckWait: time.Minute}}
			}
			m.reconcile(context.Background(), infos, ServerSettings{}, false, now.Add(time.Duration(round)*refresh))
		}
		js.mu.Lock()
		n := len(js.deleted)
		js.mu.Unlock()
		if n > 0 {
			return
		}
	}
	t.Errorf("no consumer retired after 5 refreshes with a tenant waiting: member a yields %v, member b %v", yielding(a), yielding(b))
}

func yielding(tp *tenantPull) []string {
	var out []string
	for t, tl := range tp.loops {
		if tl.yielding {
			out = append(out, t)
		}
	}
	return out
}

// TestFairPullYieldedTakesASlotLast: the tenant whose consumer this
// member retired for its lease waits again from then: behind the tenants
// that were waiting while it held the slot (before, it drew on equal terms
// with them: with one tenant waiting, half the rotations gave the slot
// straight back), ahead of a tenant that appears after it (a producer
// minting tenants cannot keep it out); and is forgotten once it has no
// jobs.
func TestFairPullYieldedTakesASlotLast(t *testing.T) {
	const idle = time.Minute
	now := time.Now()
	tp, js := leaseRig(idle, 1)
	made := now.Add(-2 * idle)
	hogInfo := map[string]*natsjs.ConsumerInfo{"hog": {Name: "embedder_hog", Created: made, NumPending: 5}}
	tenants := map[string]bool{"hog": true, "a": true, "b": true, "c": true}
	tp.newcomers(tenants, hogInfo, now) // the scan that found a, b and c waiting
	tp.loops["hog"] = &tenantLoop{tenant: "hog", name: "embedder_hog", since: made, created: made}
	tp.waiting = 3
	tp.reconcile(context.Background(), hogInfo, ServerSettings{}, false, now.Add(time.Second))
	js.mu.Lock()
	deleted := slices.Clone(js.deleted)
	js.mu.Unlock()
	if len(deleted) != 1 {
		t.Fatalf("deleted %q, want hog's consumer: its lease is up and tenants wait", deleted)
	}
	tenants["minted"] = true // appears after hog yielded
	for range 20 {
		if got := tp.newcomers(tenants, nil, now.Add(2*time.Second)); len(got) != 5 || got[3] != "hog" || got[4] != "minted" {
			t.Fatalf("slots drawn in the order %q: want hog, which just yielded, after a, b and c, and before minted", got)
		}
	}
	delete(tenants, "hog")
	tp.newcomers(tenants, nil, now.Add(3*time.Second))
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if _, ok := tp.queued["hog"]; ok {
		t.Error("hog is remembered as waiting with no jobs left")
	}
}

// TestFairPullLeaseRetiredAfterAnAckWait: a yielding consumer whose
// messages the server still counts as pending an ack (a member died
// holding them: nobody pulls it to have them delivered again) is retired
// once it has yielded for an ack wait, not before, and not never.
func TestFairPullLeaseRetiredAfterAnAckWait(t *testing.T) {
	const idle = time.Minute
	now := time.Now()
	tp, js := leaseRig(idle, 1)
	made := now.Add(-2 * idle)
	tp.loops["hog"] = &tenantLoop{tenant: "hog", name: "embedder_hog", since: made, created: made, yielding: true, yieldAt: now.Add(-30 * time.Second)}
	tp.waiting = 1
	infos := map[string]*natsjs.ConsumerInfo{"hog": {Name: "embedder_hog", Created: made, NumPending: 5, NumAckPending: 3,
		Config: natsjs.ConsumerConfig{AckWait: time.Minute}}}
	for _, c := range []struct {
		at      time.Time
		deleted int
	}{{now, 0}, {now.Add(31 * time.Second), 1}} {
		tp.reconcile(context.Background(), infos, ServerSettings{}, false, c.at)
		js.mu.Lock()
		n := len(js.deleted)
		js.mu.Unlock()
		if n != c.deleted {
			t.Errorf("%v after yielding: %d consumers deleted, want %d", c.at.Sub(now)+30*time.Second, n, c.deleted)
		}
	}
}

// consumerJS is leaseJS with a consumer to pull from: the pull loop's
// own checks run, nothing is fetched.
type consumerJS struct{ leaseJS }

func (j *consumerJS) Consumer(context.Context, string, string) (natsjs.Consumer, error) {
	return nil, nil
}

// refusedPullRig is a member's per-tenant pull whose fetch loops do not
// start: the server has the consumers, the loop refuses its options.
func refusedPullRig() *tenantPull {
	w := &Worker{js: &consumerJS{}, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		cfg: WorkerConfig{Config: DefaultConfig(), Pull: []PullOption{PrefetchLimits(2, 1)}}}
	return &tenantPull{w: w, gate: newFairGate(&takeSink{}, Shares{}, newQuotas(Shares{}, nil)), idle: time.Minute, scan: time.Minute, max: 1,
		loops: map[string]*tenantLoop{}, done: make(chan struct{})}
}

// TestFairPullLoopNotStartedForgotten: a tenant's fetch loop that does not
// start (a pull option the loop refuses) leaves nothing of the tenant in
// the fair gate; before, each such tenant stayed registered for good.
func TestFairPullLoopNotStartedForgotten(t *testing.T) {
	now := time.Now()
	tp := refusedPullRig()
	tp.reconcile(context.Background(), map[string]*natsjs.ConsumerInfo{"a": {Name: "embedder_a", Created: now, NumPending: 1}}, ServerSettings{}, false, now)
	if tl := tp.loops["a"]; tl == nil || tl.get() != nil {
		t.Fatalf("a's loop %+v: want kept, not started", tl)
	}
	tp.gate.mu.Lock()
	defer tp.gate.mu.Unlock()
	if _, ok := tp.gate.more["a"]; ok {
		t.Error("a's loop did not start, and a stays registered in the fair gate")
	}
}

// TestFairPullYieldedInTurn: two tenants take turns at one slot. The one
// that yielded first has waited for a slot since, so when the other
// yields it back the slot is its: the tenant that has just yielded comes
// after it. Before, a tenant stayed marked as yielded until it had a
// consumer again, so from the second turn on the two drew on equal terms
// and half the turns gave the slot straight back.
func TestFairPullYieldedInTurn(t *testing.T) {
	const idle = time.Minute
	now := time.Now()
	tp, js := leaseRig(idle, 1)
	tenants := map[string]bool{"a": true, "b": true}
	made := now.Add(-2 * idle)
	tp.waiting = 1
	aInfo := map[string]*natsjs.ConsumerInfo{"a": {Name: "embedder_a", Created: made, NumPending: 5}}
	tp.newcomers(tenants, aInfo, now.Add(-time.Second)) // the scan that found b waiting
	tp.loops["a"] = &tenantLoop{tenant: "a", name: "embedder_a", since: made, created: made}
	tp.reconcile(context.Background(), aInfo, ServerSettings{}, false, now)
	if got := tp.newcomers(tenants, nil, now); !slices.Equal(got, []string{"b", "a"}) {
		t.Fatalf("after a yielded, slots drawn in the order %q", got)
	}
	// b takes the slot, holds it for its lease, and yields it.
	later := now.Add(2 * idle)
	bInfo := map[string]*natsjs.ConsumerInfo{"b": {Name: "embedder_b", Created: now, NumPending: 5}}
	tp.newcomers(tenants, bInfo, now) // a scan while b holds the slot
	tp.loops["b"] = &tenantLoop{tenant: "b", name: "embedder_b", since: now, created: now}
	tp.reconcile(context.Background(), bInfo, ServerSettings{}, false, later)
	js.mu.Lock()
	deleted := slices.Clone(js.deleted)
	js.mu.Unlock()
	if !slices.Equal(deleted, []string{"embedder_a", "embedder_b"}) {
		t.Fatalf("deleted %q, want a's then b's consumer", deleted)
	}
	for range 20 {
		if got := tp.newcomers(tenants, nil, later); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("after b yielded, slots drawn in the order %q: want a, which waited while b held the slot, first", got)
		}
	}
}

// TestFairPullReopenNotStartedKeepsTheRunningLoop: a reopen (the template
// changed) whose new loop does not start leaves the tenant's running loop
// as it was, registered in the fair gate with its count of jobs; before,
// the failed start forgot the tenant under the running loop: its turn was
// no longer held, and its count went back to 0 (the loop sizes its
// prefetch on that count: read as a jump, it went to the maximum).
func TestFairPullReopenNotStartedKeepsTheRunningLoop(t *testing.T) {
	now := time.Now()
	tp := refusedPullRig()
	running := &PullLoop{} // stands for the loop of the old settings, running
	tl := &tenantLoop{tenant: "a", name: "embedder_a", since: now, created: now, loop: running}
	tl.sink = tp.gate.forTenant("a", func() bool { return false })
	tp.loops["a"] = tl
	tp.gate.mu.Lock()
	tp.gate.jobs["a"] = 7
	tp.gate.mu.Unlock()
	tp.reconcile(context.Background(), map[string]*natsjs.ConsumerInfo{"a": {Name: "embedder_a", Created: now, NumPending: 1}}, ServerSettings{}, true, now)
	if tl.get() != running {
		t.Fatal("the running loop was replaced by one that did not start")
	}
	tp.gate.mu.Lock()
	defer tp.gate.mu.Unlock()
	if tp.gate.more["a"] != tl.sink.loop || tp.gate.jobs["a"] != 7 {
		t.Errorf("the running loop's tenant in the gate: registered %v (want its own), %d jobs (want 7)", tp.gate.more["a"] == tl.sink.loop, tp.gate.jobs["a"])
	}
}
