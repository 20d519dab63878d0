package fleet_test

import (
	"context"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/fleet"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/jetstream/jstest"
)

// TestFleetLockHeldPastTTLUnderDomain: members on a leaf node reach the
// engines bucket through the hub's JetStream domain. A compile that takes
// three lock TTLs keeps its lock by renewing it through the domain, so the
// peer that asks for the same shape waits and loads it instead of building
// it too. (Renewals published to $KV.<bucket>.<key> never reached the
// hub: the lock expired after one TTL and the peer built the shape.)
func TestFleetLockHeldPastTTLUnderDomain(t *testing.T) {
	d := natstest.RunDomain(t)
	cfg := jetstream.DefaultConfig()
	jsOf := func() natsjs.JetStream {
		js, err := natsjs.NewWithDomain(connect(t, d.Leaf.ClientURL()), d.HubDomain)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := jsOf()
	jstest.Provision(t, js, cfg)
	const ttl = time.Second
	join := func(e fleet.Engine, model, name string) *fleet.Member {
		kv, err := jetstream.OpenKVStore(ctx, jsOf(), cfg.Engines.Name)
		if err != nil {
			t.Fatal(err)
		}
		m, err := fleet.Join(t.Context(), kv, e, fleet.Config{
			Model: model, Member: name, Tick: 50 * time.Millisecond, IdleQuiet: time.Hour,
			LockTTL: ttl, Logger: testLogger(t).With("member", name),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Stop(context.Background()) })
		return m
	}
	a := newCounting(openEngine(t, guardedConfig()))
	b := newCounting(openEngine(t, guardedConfig()))
	model := a.ModelID()
	ma, mb := join(a, model, "a"), join(b, model, "b")

	a.gate = make(chan struct{})
	errs := make(chan error, 2)
	go func() { errs <- ma.Compile(ctx, 4, 256) }()
	kv, err := js.KeyValue(ctx, cfg.Engines.Name)
	if err != nil {
		t.Fatal(err)
	}
	lock := shapeKey(model, 4, 256).Lock()
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		_, err := kv.Get(ctx, lock)
		return err
	})
	go func() { errs <- mb.Compile(ctx, 4, 256) }()
	// The lock renewed across 3 TTLs of compiling: had it lapsed, b would
	// have taken it.
	fkv, err := jetstream.OpenKVStore(ctx, js, cfg.Engines.Name)
	if err != nil {
		t.Fatal(err)
	}
	renewedFor(t, fkv, 3*ttl, lock)
	if n := b.warmed(4, 256); n != 0 {
		t.Fatalf("b built 4x256 (%d runs) while a held the lock", n)
	}
	close(a.gate)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if sa, sb := ma.Stats(), mb.Stats(); sa.Compiles != 1 || sb.Compiles != 0 || sb.Prewarms != 1 {
		t.Errorf("a %+v, b %+v; want one compile by a, pre-warmed by b", sa, sb)
	}
}
