package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/fleet"
	"github.com/jetembed/jetembed/internal/natstest"
)

// TestFleetMembership: a member's heartbeat key shows its coverage while
// it lives; a member that leaves deletes it, one that dies lets it
// expire, and the records of both are then marked gone. A want nobody
// builds expires too.
func TestFleetMembership(t *testing.T) {
	srv := newServer(t, nil)
	a := openEngine(t, guardedConfig())
	model := a.ModelID()
	ttl := func(c *fleet.Config) { c.MemberTTL, c.WantTTL = time.Second, time.Second }
	ma := startMember(t, srv, a, model, "host-a/1", ttl)
	b := openEngine(t, guardedConfig())
	mb := startMember(t, srv, b, model, "host-b/2", ttl)

	// The dying member: its own connection, closed without leaving.
	nc := connect(t, srv.URL)
	djs, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	d := openEngine(t, guardedConfig())
	cfg := fleet.Config{Model: model, Member: "host-d/3", Tick: 50 * time.Millisecond, IdleQuiet: time.Hour, Logger: testLogger(t)}
	ttl(&cfg)
	md, err := fleet.Join(t.Context(), store(t, djs, srv), d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = md.Stop(context.Background()) })
	if err := d.WarmShape(context.Background(), 2, 128); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kv := store(t, srv.JS, srv)
	natstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		tab, err := fleet.Read(ctx, kv)
		if err != nil {
			return err
		}
		if len(tab.Members) != 3 {
			return fmt.Errorf("members %+v; want 3", tab.Members)
		}
		for _, m := range tab.Members {
			if m.Name == "host-d/3" && (m.Ceiling != 128 || m.Shapes != 4) {
				return fmt.Errorf("d's coverage %+v; want 4 shapes up to 128", m)
			}
		}
		return nil
	})
	// Live for longer than the TTL: the heartbeat renews the keys.
	tab, err := fleet.Read(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, m := range tab.Members {
		keys = append(keys, m.Key)
	}
	renewedFor(t, kv, 1500*time.Millisecond, keys...)
	if tab, err := fleet.Read(ctx, kv); err != nil || len(tab.Members) != 3 {
		t.Fatalf("after a TTL: %+v, %v; want 3 live members", tab.Members, err)
	}
	// A want no one builds, then d dies and b leaves.
	ma.Want(1, 256)
	natstest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		if _, err := kv.Get(ctx, shapeKey(model, 1, 256).Want()); err != nil {
			return err
		}
		return nil
	})
	nc.Close()
	_ = mb.Stop(context.Background())
	natstest.CheckFor(t, 10*time.Second, 100*time.Millisecond, func() error {
		tab, err := fleet.Read(ctx, kv)
		if err != nil {
			return err
		}
		if len(tab.Members) != 1 || tab.Members[0].Name != "host-a/1" {
			return fmt.Errorf("members %+v; want only host-a/1", tab.Members)
		}
		for _, s := range tab.Shapes {
			if s.Key.Seq == 128 && (s.By != "host-d/3" || !s.Gone) {
				return fmt.Errorf("shape %+v: want d's record marked gone", s)
			}
		}
		if len(tab.Wants) != 0 {
			return fmt.Errorf("wants %+v; want the stale one expired", tab.Wants)
		}
		return nil
	})
	if _, err := kv.Get(ctx, fleet.MemberKey("host-b/2")); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("b's member key after it left: %v", err)
	}
}
