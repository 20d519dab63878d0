package jetstream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/fleet"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/jetstream/jstest"
)

// domainRig is a client on the leaf of a [natstest.Domain] that uses the
// hub's JetStream domain, the objects provisioned through it, and the
// engines bucket as the fleet's store.
func domainRig(t *testing.T, ctx context.Context) (natsjs.JetStream, jetstream.Config, *jetstream.KVStore) {
	t.Helper()
	d := natstest.RunDomain(t)
	js, err := natsjs.NewWithDomain(connect(t, d.Leaf.ClientURL()), d.HubDomain)
	if err != nil {
		t.Fatal(err)
	}
	cfg := jetstream.DefaultConfig()
	jstest.Provision(t, js, cfg)
	kv, err := jetstream.OpenKVStore(ctx, js, cfg.Engines.Name)
	if err != nil {
		t.Fatal(err)
	}
	return js, cfg, kv
}

// TestKVStoreLockRenewalUnderDomain: the compile lock's create, renewal
// (a put at the lock's revision with a fresh TTL) and release all reach
// the bucket of the hub's domain from a client on a leaf node.
func TestKVStoreLockRenewalUnderDomain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, _, kv := domainRig(t, ctx)
	const key, ttl = "lock.m.cpu.b1.s64", 2 * time.Second
	rev, err := kv.Create(ctx, key, []byte(`{"by":"a"}`), ttl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, key, []byte(`{"by":"b"}`), ttl); !errors.Is(err, fleet.ErrExists) {
		t.Fatalf("second create: %v, want ErrExists", err)
	}
	// Renew for longer than the TTL: the lock must stay.
	for range 4 {
		time.Sleep(ttl / 2)
		next, err := kv.Update(ctx, key, []byte(`{"by":"a"}`), rev, ttl)
		if err != nil {
			t.Fatalf("renewal at revision %d: %v", rev, err)
		}
		rev = next
	}
	e, err := kv.Get(ctx, key)
	if err != nil || e.Revision != rev {
		t.Fatalf("after renewals: %+v, %v; want revision %d", e, err, rev)
	}
	if _, err := kv.Update(ctx, key, []byte(`{"by":"b"}`), rev-1, ttl); !errors.Is(err, fleet.ErrRevision) {
		t.Errorf("renewal at a stale revision: %v, want ErrRevision", err)
	}
	if err := kv.Delete(ctx, key, rev-1); !errors.Is(err, fleet.ErrRevision) {
		t.Errorf("release at a stale revision: %v, want ErrRevision", err)
	}
	if err := kv.Delete(ctx, key, rev); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, key); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("after release: %v, want ErrNotFound", err)
	}
	// Not renewed, a lock expires by its TTL.
	if _, err := kv.Create(ctx, key, []byte(`{"by":"c"}`), time.Second); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 10*time.Second, 100*time.Millisecond, func() error {
		if _, err := kv.Get(ctx, key); !errors.Is(err, fleet.ErrNotFound) {
			return errors.New("lock still there")
		}
		return nil
	})
}

// TestKVStoreOldRenewalSubjectMissesDomain documents the bug the renewal
// through [jetstream.KVStore] fixes: the renewal the fleet used to publish
// (to $KV.<bucket>.<key>, whatever the JetStream context) does not reach
// the domain's bucket from a leaf node ("no response from stream"), so a
// compile longer than the lock's TTL lost its lock to a peer.
func TestKVStoreOldRenewalSubjectMissesDomain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js, cfg, kv := domainRig(t, ctx)
	const key = "lock.m.cpu.b1.s64"
	rev, err := kv.Create(ctx, key, []byte(`{"by":"a"}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	defer pcancel()
	_, err = js.PublishMsg(pctx, &nats.Msg{Subject: "$KV." + cfg.Engines.Name + "." + key, Data: []byte(`{"by":"a"}`)},
		natsjs.WithMsgTTL(5*time.Second), natsjs.WithExpectLastSequencePerSubject(rev))
	if err == nil {
		t.Fatal("a put to $KV.<bucket>.<key> from the leaf reached the hub's bucket")
	}
	t.Logf("the old renewal fails: %v", err)
}
