package node_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/ort/enginetest"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/jetstream/jstest"
	"github.com/jetembed/jetembed/node"
	"github.com/jetembed/jetembed/schema"
)

// syncBuffer is a log sink safe for the node's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// rig is a nats-server with the jetembed objects provisioned, and a
// producer on it.
type rig struct {
	url    string
	nc     *nats.Conn
	client *client.Client
}

func newRig(t *testing.T, provision bool) *rig {
	t.Helper()
	srv := natstest.RunServer(t)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if provision {
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		jstest.Provision(t, js, jetstream.DefaultConfig())
	}
	c, err := client.New(nc, client.WithRun("rt"))
	if err != nil {
		t.Fatal(err)
	}
	return &rig{url: srv.ClientURL(), nc: nc, client: c}
}

// config is a node on the rig's server around a tiny engine opened
// with ecfg.
func (r *rig) config(t *testing.T, ecfg engine.Config, log io.Writer) node.Config {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(log, nil))
	return node.Config{
		NATS:    jetstream.Options{URLs: []string{r.url}, Logger: logger},
		Objects: jetstream.DefaultConfig(),
		Open: func(context.Context) (node.Engine, error) {
			return node.Engine{Engine: enginetest.Open(t, ecfg)}, nil
		},
		InteractiveTokens: 7777,
		Grace:             5 * time.Second,
		Version:           "1.2.3",
		Logger:            logger,
	}
}

// TestNodeServesAndStops: a started runtime answers queued jobs and
// requests, says its capacity in the service info, and a Stop drains it:
// Done closes and Err is nil.
func TestNodeServesAndStops(t *testing.T) {
	r := newRig(t, true)
	var log syncBuffer
	rt, err := node.New(r.config(t, engine.Config{}, &log))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rt.Start(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := r.client.Embed(ctx, "hello", "world")
	if err != nil || len(res.Items) != 2 || len(res.Items[0].Dense) == 0 {
		t.Fatalf("Embed = %+v, %v; want two dense vectors", res, err)
	}
	m, err := r.client.PingService(ctx)
	if err != nil || m.InteractiveTokens != 7777 || m.Version != "1.2.3" || m.MaxTokens == 0 {
		t.Errorf("service member %+v, %v: want the configured interactive tokens, version and max tokens", m, err)
	}
	if _, err := r.client.Submit(ctx, schema.NewJob("q-1", "queued")); err != nil {
		t.Fatal(err)
	}
	got := false
	for res, err := range r.client.Results(ctx, r.client.Run()) {
		if err == nil && res.ID == "q-1" && res.Error == nil {
			got = true
			break
		}
	}
	if !got {
		t.Fatal("no result for the queued job")
	}
	select {
	case <-rt.Done():
		t.Fatal("Done closed while serving")
	default:
	}
	if err := rt.Stop(ctx); err != nil {
		t.Errorf("Stop = %v, want nil after a requested stop", err)
	}
	select {
	case <-rt.Done():
	default:
		t.Fatal("Done not closed after Stop")
	}
	if rt.Err() != nil {
		t.Errorf("Err = %v after a requested stop", rt.Err())
	}
	if _, err := r.client.Embed(ctx, "anyone?"); !errors.Is(err, client.ErrNoService) {
		t.Errorf("Embed after Stop: %v, want ErrNoService", err)
	}
}

// TestNodeAdvertisesWhatTheEngineAdmits: the interactive capacity the
// service advertises to gateways is the budget the engine admits by, with
// the budgets configured and with their defaults alike (the one default
// of [engine.DefaultBudgets]).
func TestNodeAdvertisesWhatTheEngineAdmits(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		inFlight, interactive int
		wantBulk, wantInter   int
	}{
		{"configured", 20000, 9000, 20000, 9000},
		{"defaults", 0, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, true)
			var log syncBuffer
			cfg := r.config(t, engine.Config{}, &log)
			cfg.InFlightTokens, cfg.InteractiveTokens = tc.inFlight, tc.interactive
			var eng *engine.Engine
			open := cfg.Open
			cfg.Open = func(ctx context.Context) (node.Engine, error) {
				e, err := open(ctx)
				eng = e.Engine
				return e, err
			}
			rt, err := node.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := rt.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer rt.Stop(ctx)
			m, err := r.client.PingService(ctx)
			if err != nil {
				t.Fatal(err)
			}
			st := eng.Stats()
			wantBulk, wantInter := tc.wantBulk, tc.wantInter
			if wantBulk == 0 {
				wantBulk, wantInter = engine.DefaultBudgets(0, 0, engine.DefaultMaxBatchTokens, 1)
			}
			if st.AdmissionBudget != wantBulk || st.InteractiveBudget != wantInter {
				t.Errorf("the engine admits %d bulk and %d interactive tokens, want %d and %d", st.AdmissionBudget, st.InteractiveBudget, wantBulk, wantInter)
			}
			if m.InteractiveTokens != st.InteractiveBudget {
				t.Errorf("the service advertises %d interactive tokens, the engine admits %d", m.InteractiveTokens, st.InteractiveBudget)
			}
		})
	}
}

// TestNodeMissingObjects: with the objects absent, Start fails with
// ErrObjects naming them (no engine is opened), and CreateMissing
// creates them instead.
func TestNodeMissingObjects(t *testing.T) {
	r := newRig(t, false)
	var log syncBuffer
	cfg := r.config(t, engine.Config{}, &log)
	opened := false
	open := cfg.Open
	cfg.Open = func(ctx context.Context) (node.Engine, error) {
		opened = true
		return open(ctx)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := node.Run(ctx, cfg)
	if !errors.Is(err, node.ErrObjects) || !errors.Is(err, jetstream.ErrMissing) {
		t.Fatalf("Run = %v, want ErrObjects wrapping jetstream.ErrMissing", err)
	}
	if opened {
		t.Error("the engine was opened although the objects were missing")
	}
	cfg.Check = node.CreateMissing
	rt, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx); err != nil {
		t.Fatalf("Start with CreateMissing: %v", err)
	}
	defer rt.Stop(ctx)
	if _, err := r.client.Embed(ctx, "hello"); err != nil {
		t.Errorf("Embed: %v", err)
	}
}

// TestNodeConfigErrors: an unusable config is refused by New or Start
// with ErrConfig, before anything runs.
func TestNodeConfigErrors(t *testing.T) {
	r := newRig(t, true)
	for name, edit := range map[string]func(*node.Config){
		"no open":     func(c *node.Config) { c.Open = nil },
		"bad result":  func(c *node.Config) { c.MaxResultBytes = -2 },
		"api address": func(c *node.Config) { c.API = &node.APIConfig{} },
		"objects":     func(c *node.Config) { c.Objects.Jobs.Name = "" },
		"job loop":    func(c *node.Config) { c.Loop.InProgressFraction = 2 },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := r.config(t, engine.Config{}, io.Discard)
			edit(&cfg)
			rt, err := node.New(cfg)
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				err = rt.Start(ctx)
			}
			if !errors.Is(err, node.ErrConfig) {
				t.Errorf("err %v, want ErrConfig", err)
			}
		})
	}
}

// TestNodeStopBeforeStart: a node never started stops at once.
func TestNodeStopBeforeStart(t *testing.T) {
	r := newRig(t, true)
	rt, err := node.New(r.config(t, engine.Config{}, io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Stop(context.Background()); err != nil {
		t.Errorf("Stop = %v", err)
	}
	<-rt.Done()
	if err := rt.Start(context.Background()); err == nil {
		t.Error("Start after Stop: no error")
	}
}

// TestNodeOneSampler: the process reads the jobs consumer's info from
// one sampler only, at Config.Refresh, whatever it feeds (the prefetch
// bound, the gauges, the heartbeat and, with the fleet on, its idleness):
// the server sees one consumer info request per period, not one per user.
func TestNodeOneSampler(t *testing.T) {
	r := newRig(t, true)
	cfg := r.config(t, engine.Config{}, io.Discard)
	cfg.Refresh = 100 * time.Millisecond
	cfg.Heartbeat = 50 * time.Millisecond
	cfg.Fleet = node.FleetConfig{On: true}
	cfg.Fleet.Member.IdleQuiet = 50 * time.Millisecond
	cfg.Fleet.Member.Tick = 50 * time.Millisecond
	var mu sync.Mutex
	infos := 0
	sub, err := r.nc.Subscribe("$JS.API.CONSUMER.INFO.>", func(*nats.Msg) {
		mu.Lock()
		infos++
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	rt, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rt.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer rt.Stop(ctx)
	mu.Lock()
	infos = 0
	mu.Unlock()
	const window = 2 * time.Second
	time.Sleep(window) // counting requests over a span of wall time: the span is the measure
	mu.Lock()
	n := infos
	mu.Unlock()
	t.Logf("%d consumer info requests in %v", n, window)
	if max := int(window/cfg.Refresh) + 3; n > max || n < 5 {
		t.Errorf("%d consumer info requests in %v with a sample every %v: want one sampler (%d at most)", n, window, cfg.Refresh, max)
	}
}

// TestNodeBusyHealthAddress: a health address that cannot be bound fails
// Start with the bind error, and the node ends cleanly (it used to panic:
// the health server's stop function stayed nil and end called it).
func TestNodeBusyHealthAddress(t *testing.T) {
	r := newRig(t, true)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := r.config(t, engine.Config{}, io.Discard)
	cfg.HTTP = busy.Addr().String()
	rt, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rt.Start(ctx); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("Start = %v, want address in use", err)
	}
	<-rt.Done()
	if err := rt.Stop(ctx); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("Stop = %v, want the start error", err)
	}
}
