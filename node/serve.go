package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/fleet"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// session is the serving on one connection: the fleet membership, the
// worker, the gauges and the HTTP API in front of the worker.
type session struct {
	r         *Node
	nc        *nats.Conn
	w         *jetstream.Worker
	leave     func() // leaves the fleet; idempotent
	stopAPI   func() // idempotent
	unobserve func()
}

// serveOn starts serving on nc. lost reports, with an error, that the
// connection closed by itself meanwhile (the caller dials again); an error
// with lost false is one a new connection would not cure.
func (r *Node) serveOn(ctx context.Context, nc *nats.Conn, js natsjs.JetStream, first bool) (s *session, lost bool, err error) {
	connected := nc.IsConnected
	r.live.connected.Store(&connected)
	gone := func() bool { return nc.IsClosed() && r.runCtx.Err() == nil }
	e := r.eng.Engine
	// The fleet's idleness asks the worker's consumer-info sampler for the
	// backlog; the worker starts after the fleet, whose Embedder it takes.
	var cur atomic.Pointer[jetstream.Worker]
	busy := func() bool {
		w := cur.Load()
		if w == nil {
			return false
		}
		pending, _ := w.Backlog()
		return pending > 0
	}
	emb, leave, err := r.joinFleet(ctx, js, e, busy)
	if err != nil {
		return nil, gone(), err
	}
	wc := r.workerConfig(emb, e)
	w, err := jetstream.StartWorker(ctx, nc, wc)
	if err != nil {
		leave()
		if errors.Is(err, consumer.ErrConfig) {
			return nil, false, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		return nil, gone(), err
	}
	cur.Store(w)
	unobserve := observe(r.log, r.metrics, w, e, r.cfg.Heartbeat)
	// The HTTP API hands its calls to this process's job loop directly:
	// the embedder user needs no producer's grants to request the service
	// and no reply inbox. It stops before the worker, and is started again
	// with the worker of a new connection.
	stopAPI, err := r.startAPI(w, nc.MaxPayload())
	if err != nil {
		grace, cancel := context.WithTimeout(context.Background(), r.cfg.Grace)
		defer cancel()
		_ = w.Stop(grace)
		unobserve()
		leave()
		return nil, false, err
	}
	if first {
		attrs := []any{"model", e.ModelID(), "nats", jetstream.RedactURL(nc.ConnectedUrl()), "stream", r.cfg.Objects.Jobs.Name,
			"consumer", r.cfg.Objects.Consumer.Name, "endpoint", schema.SubjectEmbed, "version", r.cfg.Version}
		attrs = append(attrs, r.cfg.Notes...)
		attrs = append(attrs, r.eng.Notes...)
		attrs = append(attrs, "max_result_bytes", wc.Consumer.MaxResultBytes)
		if r.cfg.Cache {
			attrs = append(attrs, "cache", r.cfg.Objects.Cache.Name)
		}
		r.log.Info("ready", attrs...)
	} else {
		r.log.Info("serving again on a new connection", "nats", jetstream.RedactURL(nc.ConnectedUrl()))
	}
	return &session{r: r, nc: nc, w: w, leave: leave, stopAPI: stopAPI, unobserve: unobserve}, false, nil
}

// workerConfig is the worker of one connection, embedding through emb.
func (r *Node) workerConfig(emb engine.Embedder, e *engine.Engine) jetstream.WorkerConfig {
	lc := r.cfg.Loop
	lc.Logger, lc.Metrics, lc.MaxResultBytes = r.log, r.metrics, r.cfg.resultLimit(e)
	// The cache's keys name the precision the engine runs (int8 when
	// --precision int8 held its canary): emb may be the fleet's wrapper,
	// which does not say it.
	if lc.Precision == "" {
		lc.Precision = e.Precision()
	}
	// And the model by every file it reads: a tokenizer or head changed
	// under the same graph has another fingerprint.
	if lc.CacheModel == "" {
		lc.CacheModel = e.ModelID() + "+" + e.ModelFingerprint()
	}
	// What the engine admits is what the service advertises.
	_, interactive := e.Budgets()
	return jetstream.WorkerConfig{
		Config:   r.cfg.Objects,
		Consumer: lc,
		Embedder: emb,
		Blobs:    r.cfg.Blobs,
		Cache:    r.cfg.Cache,
		Service: jetstream.ServiceOptions{Version: r.cfg.Version, Logger: r.log, Tokenizer: r.eng.Tokenizer,
			Metadata: map[string]string{schema.MetaModel: e.ModelID(),
				schema.MetaInteractiveTokens: strconv.Itoa(interactive), schema.MetaMaxTokens: strconv.Itoa(e.MaxTokens())}},
		PrefetchMax: r.cfg.PrefetchMax,
		Fair:        r.cfg.Fair,
		Pull:        []jetstream.PullOption{jetstream.PrefetchBytes(r.cfg.PrefetchBytes)},
		Refresh:     r.cfg.Refresh,
		Grace:       r.cfg.Grace,
		Logger:      r.log,
	}
}

// joinFleet joins the fleet with e (a no-op with the fleet off): the
// returned Embedder reports the JIT guard's refusals as wants, and leave
// (idempotent) leaves the fleet. The runtime joins again on every new
// connection.
func (r *Node) joinFleet(ctx context.Context, js natsjs.JetStream, e *engine.Engine, busy func() bool) (emb engine.Embedder, leave func(), err error) {
	f := r.cfg.Fleet
	if !f.On {
		return e, func() {}, nil
	}
	kv, err := jetstream.OpenKVStore(ctx, js, r.cfg.Objects.Engines.Name)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (provision the bucket, or serve with --fleet=off)", err)
	}
	mc := f.Member
	mc.Model, mc.Busy, mc.Logger = e.ModelID(), busy, r.log
	// The membership lives until the node stops (or leave).
	fl, err := fleet.Join(r.runCtx, kv, e, mc)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (provision the bucket, or serve with --fleet=off)", err)
	}
	return fleet.Wrap(e, fl), sync.OnceFunc(func() { _ = fl.Stop(context.Background()) }), nil
}

// wait serves until the node is stopped (it drains; lost is false), the
// connection closes by itself (lost is true: the caller dials again), the
// worker stops on its own or the engine meets a fatal error. An error with
// lost false is one a new connection would not cure.
func (s *session) wait() (lost bool, err error) {
	r, w := s.r, s.w
	defer s.unobserve()
	defer s.stopAPI()
	var grace context.Context
	select {
	case grace = <-r.stop:
	case <-w.Done():
	case <-r.eng.Engine.Fatal():
		return false, s.stopFatal()
	}
	if s.nc.IsClosed() && r.runCtx.Err() == nil {
		<-w.Done()
		s.leave()
		st := w.Loop().Stats()
		r.log.Info("connection lost: the jobs it held come back after ack-wait", "jobs", st.Jobs, "texts", st.Texts)
		return true, nil
	}
	r.live.draining.Store(true)
	s.stopAPI()
	if grace == nil { // the worker stopped on its own: Stop returns at once
		g, cancel := context.WithTimeout(context.Background(), r.cfg.Grace)
		defer cancel()
		grace = g
	}
	_ = w.Stop(grace)
	s.leave()
	if err := drainConn(s.nc); err != nil {
		r.log.Warn("nats drain", "err", err)
	}
	st := w.Loop().Stats()
	r.log.Info("stopped", "jobs", st.Jobs, "texts", st.Texts)
	return false, w.Err()
}

// stopFatal ends serving after a fatal engine-build error: not ready at
// once, every in-flight and buffered job NAKed without delay (no grace:
// the engine can finish nothing), the fleet left, and an error wrapping
// engine.ErrFatal, for which the process should exit so that the
// orchestrator replaces it.
func (s *session) stopFatal() error {
	r := s.r
	r.live.fatal.Store(true)
	err := engineErr(r.eng.Engine)
	r.log.Error("fatal engine error: giving the jobs back and exiting", "err", r.eng.Engine.FatalErr())
	now, cancel := context.WithCancel(context.Background())
	cancel()
	_ = s.w.Stop(now)
	s.leave()
	if err := drainConn(s.nc); err != nil {
		r.log.Warn("nats drain", "err", err)
	}
	return err
}

// warnUnscoped says, at start, which allowed reply patterns every tenant
// may send results to.
func warnUnscoped(log *slog.Logger, p schema.ReplyPolicy) {
	if shared := p.Unscoped(); len(shared) > 0 && !p.Tenancy.Off {
		log.Warn("reply patterns without {tenant}: every tenant may send results there", "patterns", strings.Join(shared, ","))
	}
}
