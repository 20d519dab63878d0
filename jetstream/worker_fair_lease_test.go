package jetstream

import (
	"context"
	"errors"
	"io"
	"log/slog"
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
