package fleet_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetembed/jetembed/fleet"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/internal/natstest"
)

// The fleet tests run several members in one process, each with its own
// engine (the tiny model on ONNX Runtime, CPU) and its own NATS connection,
// on one server: on CPU "compiling" a shape is its warm-up run.

// guardedConfig is a CPU engine with the JIT guard on from seq 64 and a
// warm-up grid that stops at 32, so a text of about 100 tokens is refused
// until someone warms a longer shape.
func guardedConfig() engine.Config {
	return engine.Config{
		Guard: true, GuardSeq: 64, MaxTokens: 512,
		Warmup: []engine.Shape{{Batch: 1, Seq: 8}, {Batch: 1, Seq: 16}, {Batch: 1, Seq: 32}},
	}
}

// hundredTokens is about 100 tokens long.
var hundredTokens = strings.Repeat("word ", 98)

// countingEngine counts WarmShape calls per shape, and holds them at gate
// when it is set: a compile that takes as long as the test wants.
type countingEngine struct {
	*engine.Engine
	gate chan struct{}

	mu    sync.Mutex
	warms map[engine.Shape]int
}

func newCounting(e *engine.Engine) *countingEngine {
	return &countingEngine{Engine: e, warms: map[engine.Shape]int{}}
}

func (c *countingEngine) WarmShape(ctx context.Context, batch, seq int) error {
	c.mu.Lock()
	c.warms[engine.Shape{Batch: batch, Seq: seq}]++
	c.mu.Unlock()
	if c.gate != nil {
		select {
		case <-c.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return c.Engine.WarmShape(ctx, batch, seq)
}

func (c *countingEngine) warmed(batch, seq int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.warms[engine.Shape{Batch: batch, Seq: seq}]
}

// startMember joins the fleet with a connection of its own. Members tick
// every 50ms and never compile wanted shapes unless edit lowers IdleQuiet.
func startMember(t *testing.T, srv *server, eng fleet.Engine, model, name string, edit func(*fleet.Config)) *fleet.Member {
	t.Helper()
	js, err := natsjs.New(connect(t, srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	cfg := fleet.Config{
		Model: model, SM: "cpu", Member: name,
		Tick: 50 * time.Millisecond, IdleQuiet: time.Hour, LockTTL: 2 * time.Second,
		Logger: testLogger(t).With("member", name),
	}
	if edit != nil {
		edit(&cfg)
	}
	f, err := fleet.Join(t.Context(), store(t, js, srv), eng, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Stop(context.Background()) })
	return f
}

func bucket(t *testing.T, srv *server) natsjs.KeyValue {
	t.Helper()
	kv, err := srv.JS.KeyValue(context.Background(), srv.Config.Engines.Name)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func shapeKey(model string, batch, seq int) fleet.ShapeKey {
	return fleet.ShapeKey{Model: fleet.KeyToken(model), SM: "cpu", Batch: batch, Seq: seq}
}

func refused(t *testing.T, e *engine.Engine, text string) bool {
	t.Helper()
	embs, _, err := e.Embed(context.Background(), []engine.Text{{Text: text, Outputs: engine.Dense, Truncate: true}}, engine.Call{})
	if err != nil {
		t.Fatal(err)
	}
	return embs[0].Err != nil
}

func TestFleetPrewarmsPeersShapes(t *testing.T) {
	srv := newServer(t, nil)
	var engs []*engine.Engine
	var members []*fleet.Member
	for _, name := range []string{"a", "b", "c"} {
		e := openEngine(t, guardedConfig())
		engs = append(engs, e)
		members = append(members, startMember(t, srv, e, e.ModelID(), name, nil))
	}
	model := engs[0].ModelID()
	kv := bucket(t, srv)
	ctx := context.Background()

	// A TensorRT plan built on another SM must not be loaded here.
	other := fleet.ShapeKey{Model: fleet.KeyToken(model), SM: "sm89", Batch: 1, Seq: 256}
	if _, err := kv.Put(ctx, other.String(), []byte(`{"by":"gpu-host"}`)); err != nil {
		t.Fatal(err)
	}
	if !refused(t, engs[1], hundredTokens) {
		t.Fatal("precondition: B's guard admits a 100-token text before any peer warmed its tier")
	}

	// A warms a shape past the guard (start-up, adaptive or in band: the
	// engine ran it); B and C pre-warm it from the bucket.
	start := time.Now()
	if err := engs[0].WarmShape(ctx, 2, 128); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		for i, e := range engs[1:] {
			if !e.ShapeWarmed(2, 128) || e.Coverage().Ceiling() < 128 {
				return fmt.Errorf("member %d: 2x128 warmed %v, ceiling %d", i+1, e.ShapeWarmed(2, 128), e.Coverage().Ceiling())
			}
			// The coverage rises with the first session's run; the
			// pre-warm is counted when it returns.
			if members[i+1].Stats().Prewarms == 0 {
				return fmt.Errorf("member %d: pre-warm not finished", i+1)
			}
		}
		return nil
	})
	t.Logf("2x128 warmed by A reached B and C in %v", time.Since(start))
	for i, m := range members[1:] {
		if st := m.Stats(); st.Prewarms != 1 || st.Compiles != 0 {
			t.Errorf("member %d: %+v; want exactly one pre-warm (2x128), no compile", i+1, st)
		}
	}
	e, err := kv.Get(ctx, shapeKey(model, 2, 128).String())
	if err != nil {
		t.Fatal(err)
	}
	if v := string(e.Value()); !strings.Contains(v, `"by":"a"`) || !strings.Contains(v, `"via":"run"`) {
		t.Errorf("shape record %s: want by a, via run", v)
	}
	// The start-up grid is in the bucket once, whoever wrote it first.
	for _, seq := range []int{8, 16, 32} {
		if _, err := kv.Get(ctx, shapeKey(model, 1, seq).String()); err != nil {
			t.Errorf("start-up shape 1x%d not published: %v", seq, err)
		}
	}
	// B's run of the text is an in-band first run of its chunk's shape:
	// it reaches A and C too.
	embs, rep, err := engs[1].Embed(ctx, []engine.Text{{Text: hundredTokens, Outputs: engine.Dense, Truncate: true}}, engine.Call{})
	if err != nil || embs[0].Err != nil {
		t.Fatalf("B's guard still refuses the 100-token text after pre-warming 2x128: %v %v", err, embs[0].Err)
	}
	inBand := rep.Chunks[0]
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		for i, e := range []*engine.Engine{engs[0], engs[2]} {
			if !e.ShapeWarmed(inBand.Batch, inBand.Seq) {
				return fmt.Errorf("member %d lacks B's in-band shape %dx%d", 2*i, inBand.Batch, inBand.Seq)
			}
		}
		return nil
	})
	for i, e := range engs[1:] {
		if e.ShapeWarmed(1, 256) || e.Coverage().Ceiling() >= 256 {
			t.Errorf("member %d pre-warmed a shape of another SM", i+1)
		}
	}
}

// TestFleetMinSeq checks the CPU setting: a member pre-warms only peers'
// shapes from MinSeq on, and wants no shorter shape, while every shape
// that ran is still published.
func TestFleetMinSeq(t *testing.T) {
	srv := newServer(t, nil)
	a := openEngine(t, guardedConfig())
	b := openEngine(t, guardedConfig())
	startMember(t, srv, a, a.ModelID(), "a", nil)
	mb := startMember(t, srv, b, b.ModelID(), "b", func(c *fleet.Config) { c.MinSeq = 64 })

	if err := a.Warm(context.Background(), []engine.Shape{{Batch: 2, Seq: 48}, {Batch: 2, Seq: 96}}); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if !b.ShapeWarmed(2, 96) || mb.Stats().Prewarms != 1 {
			return fmt.Errorf("b: 2x96 warmed %v, %+v", b.ShapeWarmed(2, 96), mb.Stats())
		}
		return nil
	})
	// 2x48 was published before 2x96 and queued before it, had it been.
	if b.ShapeWarmed(2, 48) {
		t.Error("b pre-warmed 2x48, below its MinSeq")
	}
	if _, err := bucket(t, srv).Get(context.Background(), shapeKey(a.ModelID(), 2, 48).String()); err != nil {
		t.Errorf("2x48 not published: %v", err)
	}
	// Wants are written in order: once the long one is in, the short one
	// would have been too.
	mb.Want(1, 48)
	mb.Want(1, 224)
	natstest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		if st := mb.Stats(); st.Wanted < 1 {
			return fmt.Errorf("b: %+v, want the 1x224 want", st)
		}
		return nil
	})
	if st := mb.Stats(); st.Wanted != 1 {
		t.Errorf("b: %+v; want only 1x224 wanted, not 1x48 below its MinSeq", st)
	}
}
