package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jetembed/jetembed/fleet"

	"github.com/jetembed/jetembed/internal/natstest"
)

// TestFleetIgnoresPoisonedBucket puts what a hostile writer (or a result
// published onto $KV.EMBED_ENGINES.<key>) can leave in the engines bucket
// and checks that a member, on the real engine, warms and compiles none of
// it, logs each key once without its value, and keeps serving the fleet:
// a good shape published after the poison still reaches it. On the code
// before the fix the 10^15-row shape panicked in the engine's warm-up
// (makeslice: len out of range) and a 64x512 shape was warmed.
func TestFleetIgnoresPoisonedBucket(t *testing.T) {
	srv := newServer(t, nil)
	e := openEngine(t, guardedConfig())
	eng := newCounting(e)
	kv := bucket(t, srv)
	ctx := context.Background()
	m := fleet.KeyToken(e.ModelID())
	rec := `{"by":"peer","via":"run"}`
	poison := map[string]string{
		m + ".cpu.b1000000000000000.s256":           rec, // the makeslice panic
		m + ".cpu.b64.s512":                         rec, // 32k padded tokens: over the 16k budget
		m + ".cpu.b8.s8192":                         rec, // over max tokens
		m + ".cpu.b1.s100":                          rec, // no tier pads to 100
		m + ".cpu.b0.s128":                          rec,
		m + ".cpu.b+2.s128":                         rec,
		m + ".cpu.b02.s128":                         rec,
		m + ".cpu.b2.s128":                          `{"by":`, // a shape fine, its value not a record
		m + ".cpu.b1.s128":                          `{"files":["../../etc/passwd"]}`,
		m + ".cpu.b1.s160":                          `{"via":"magic"}`,
		"want." + m + ".cpu.b1000000000000000.s128": `{"by":"peer"}`,
		"want." + m + ".cpu.b64.s512":               `{"by":"peer"}`,
		"want." + m + ".cpu.b1.s192":                "\xff\xfe",
		"lock." + m + ".cpu.b1.s224":                strings.Repeat("x", 70<<10),
		"garbage":                                   rec,
		"want.garbage":                              rec,
	}
	// Published as a foreign writer would, past nats.go's key check.
	put := func() {
		for k, v := range poison {
			if _, err := srv.JS.Publish(ctx, "$KV."+srv.Config.Engines.Name+"."+k, []byte(v)); err != nil {
				t.Fatalf("put %s: %v", k, err)
			}
		}
	}
	put() // read as the bucket's initial values

	var log natstest.Buffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	fl := startMember(t, srv, eng, e.ModelID(), "victim", func(c *fleet.Config) {
		c.IdleQuiet = 50 * time.Millisecond // idle compiles of wants run at once
		c.Logger = logger
	})
	put() // and again as live changes: logged once all the same

	// A good shape after the poison still arrives and is pre-warmed.
	if _, err := kv.Put(ctx, m+".cpu.b2.s96", []byte(rec)); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if !e.ShapeWarmed(2, 96) {
			return errors.New("the good shape 2x96 was not pre-warmed")
		}
		if n := fl.Stats().Ignored; n < int64(len(poison)) {
			return fmt.Errorf("%d keys ignored, want %d", n, len(poison))
		}
		return nil
	})
	// The idle compile looks five times; it would pick a poisoned want,
	// had it one.
	waitPasses(t, fl, func(st fleet.Stats) int64 { return st.IdleChecks }, 5)
	for _, sh := range [][2]int{{64, 512}, {8, 8192}, {1, 100}, {2, 128}, {1, 128}, {1, 160}, {1, 192}, {1, 224}} {
		if n := eng.warmed(sh[0], sh[1]); n != 0 {
			t.Errorf("poisoned shape %dx%d warmed %d times", sh[0], sh[1], n)
		}
	}
	if st := fl.Stats(); st.Compiles != 0 || st.Wants != 0 || st.Locks != 0 {
		t.Errorf("stats %+v: the poisoned wants and lock were taken up", st)
	}
	select {
	case <-fl.Done():
		t.Fatal("the member left the fleet")
	default:
	}
	out := log.String()
	for k, v := range poison {
		if n := strings.Count(out, "key="+k+" "); n != 1 {
			t.Errorf("key %s logged %d times, want once", k, n)
		}
		if len(v) > 8 && strings.Contains(out, v) {
			t.Errorf("the value of %s was logged", k)
		}
	}
}

// TestLoadProbeRejectsPoison: probe coefficients that are not a cost model
// (negative, out of float range, not numbers, zero) read as no probe, so
// the member measures its own; the value is not repeated in the error.
func TestLoadProbeRejectsPoison(t *testing.T) {
	srv := newServer(t, nil)
	ctx := context.Background()
	key := fleet.ProbeKey("m@1", "cpu", "x86")
	for _, v := range []string{`{"a":-1,"bq":1e-9}`, `{"a":1e999}`, `{"a":"NaN"}`, `{"a":0,"bq":0}`, `{"a":1e-6,"bq":-0.5}`, "\x00secret"} {
		if _, err := srv.JS.Publish(ctx, "$KV."+srv.Config.Engines.Name+"."+key, []byte(v)); err != nil {
			t.Fatal(err)
		}
		_, err := fleet.LoadProbe(ctx, store(t, srv.JS, srv), "m@1", "cpu", "x86")
		if !errors.Is(err, fleet.ErrNoProbe) {
			t.Errorf("probe value %q: %v, want ErrNoProbe", v, err)
		}
		if err != nil && strings.Contains(err.Error(), v) {
			t.Errorf("probe value %q repeated in the error %v", v, err)
		}
	}
}
