package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
	"github.com/jetembed/jetembed/telemetry"
)

// session is what serve builds on one NATS connection: the fleet
// membership, the publisher, the consumer, the micro service, the fetch
// loop and the pollers. The engine, metrics and health state outlive it.
type session struct {
	log     *slog.Logger
	cfg     jetstream.Config
	replies schema.ReplyPolicy
	e       *engine.Engine
	sm      string
	ef      *engineFlags
	ff      *fleetFlags
	sf      *serveFlags
	metrics *telemetry.Metrics
	live    *liveState
}

// run serves on nc until ctx ends (a signal: it drains and returns lost
// false) or the connection closes by itself (lost true: the caller dials
// again). An error with lost false is one a new connection would not cure.
func (s *session) run(ctx context.Context, nc *jetstream.Conn, js natsjs.JetStream, first bool) (lost bool, err error) {
	log, cfg, sf := s.log, s.cfg, s.sf
	connected := nc.IsConnected
	s.live.connected.Store(&connected)
	// A failure while the connection is gone is the connection's, not the
	// configuration's: report it as lost.
	fail := func(err error) (bool, error) {
		if nc.IsClosed() && ctx.Err() == nil {
			return true, err
		}
		return false, err
	}
	emb, stopFleet, err := joinFleet(ctx, log, js, s.e, s.sm, s.ef, s.ff, cfg)
	if err != nil {
		return fail(err)
	}
	stopFleet = sync.OnceFunc(stopFleet)
	defer stopFleet()

	pub, err := jetstream.NewPublisher(nc, cfg)
	if err != nil {
		return fail(err)
	}
	// By default a gathered batch fills every session's run once; the
	// engine splits it into chunks of its own --max-batch-tokens.
	gather := *sf.gatherTokens
	if gather <= 0 {
		gather = *s.ef.maxBatchTokens
		if gather <= 0 {
			gather = consumer.DefaultMaxBatchTokens
		}
		gather *= max(*s.ef.sessions, 1)
	}
	cons, err := consumer.New(consumer.Config{
		Replies:        s.replies,
		Patience:       *sf.patience,
		MaxBatchTokens: gather,
		InFlightTokens: *sf.inFlightTokens,
		AckWait:        cfg.Consumer.AckWait,
		MaxDeliver:     cfg.Consumer.MaxDeliver,
		Logger:         log,
		Metrics:        s.metrics,
	}, emb, pub)
	if err != nil {
		return false, fmt.Errorf("%w: %w", errUsage, err)
	}
	// The consumer is stopped by Drain, not by ctx: SIGTERM must let it
	// finish what it holds.
	runDone := make(chan error, 1)
	go func() { runDone <- cons.Run(context.WithoutCancel(ctx)) }()

	svc, err := jetstream.StartService(ctx, nc, cons, jetstream.ServiceOptions{
		Version: version, Metadata: map[string]string{"model": s.e.ModelID()}, Logger: log,
	})
	if err != nil {
		return fail(drainAfter(log, cons, sf, err))
	}
	jc, err := js.Consumer(ctx, cfg.Jobs.Name, cfg.Consumer.Name)
	if err != nil {
		_ = svc.Stop()
		return fail(drainAfter(log, cons, sf, fmt.Errorf("jobs consumer %s/%s: %w", cfg.Jobs.Name, cfg.Consumer.Name, err)))
	}
	loop, err := jetstream.Pull(context.WithoutCancel(ctx), jc, cons,
		jetstream.PullLogger(log), jetstream.PullAckWait(cfg.Consumer.AckWait), jetstream.PullConn(nc),
		jetstream.PrefetchLimits(min(jetstream.DefaultPrefetchMin, max(*sf.prefetchMax, 1)), max(*sf.prefetchMax, 1)),
		jetstream.PrefetchBytes(*sf.prefetchBytes))
	if err != nil {
		_ = svc.Stop()
		return fail(drainAfter(log, cons, sf, err))
	}

	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	s.poll(bg, jc, cons)
	if first {
		log.Info("ready", "model", s.e.ModelID(), "nats", jetstream.RedactURL(nc.ConnectedUrl()), "stream", cfg.Jobs.Name,
			"consumer", cfg.Consumer.Name, "endpoint", jetstream.EndpointSubject, "version", version)
	} else {
		log.Info("serving again on a new connection", "nats", jetstream.RedactURL(nc.ConnectedUrl()))
	}

	var cause error
	select {
	case <-ctx.Done():
		log.Info("stopping: draining in-flight jobs", "grace", *sf.grace)
	case <-loop.Closed():
		if nc.IsClosed() {
			lost = true
			log.Warn("the fetch loop ended: nats connection closed; results of held jobs cannot be sent, they come back after ack-wait")
		} else {
			cause = errors.New("the fetch loop ended")
			log.Error("stopping", "err", cause)
		}
	case err := <-runDone:
		runDone <- err
		cause = fmt.Errorf("the consumer stopped: %v", err)
		log.Error("stopping", "err", cause)
	}
	if !lost {
		s.live.draining.Store(true)
	}
	loop.Stop()
	if err := svc.Stop(); err != nil && !lost {
		log.Warn("micro service stop", "err", err)
	}
	err = drainAfter(log, cons, sf, cause)
	<-loop.Closed()
	<-runDone
	stopFleet()
	if !lost {
		if derr := drainConn(nc); derr != nil {
			log.Warn("nats drain", "err", derr)
		}
	}
	st := cons.Stats()
	if lost {
		log.Info("session ended", "jobs", st.Jobs, "texts", st.Texts)
		return true, nil
	}
	log.Info("stopped", "jobs", st.Jobs, "texts", st.Texts)
	return false, err
}

// poll keeps the backlog gauges, the engine state gauges and the heartbeat
// line fed until ctx ends. The backlog is polled, not asked per scrape: a
// consumer info request per scrape would put the server on the scrape path.
func (s *session) poll(ctx context.Context, jc natsjs.Consumer, cons *consumer.Consumer) {
	var pending, ackPending atomic.Int64
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			if info, err := jc.Info(ctx); err == nil {
				pending.Store(int64(info.NumPending))
				ackPending.Store(int64(info.NumAckPending))
			}
			recordEngineState(ctx, s.metrics, s.e.Stats())
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	unobserve, err := s.metrics.ObserveConsumer(func(context.Context) (telemetry.ConsumerStats, error) {
		return telemetry.ConsumerStats{Pending: uint64(pending.Load()), AckPending: int(ackPending.Load())}, nil
	})
	if err == nil {
		context.AfterFunc(ctx, func() { unobserve() })
	}
	if *s.sf.heartbeat > 0 {
		go telemetry.Heartbeat(ctx, s.log, *s.sf.heartbeat, func() telemetry.HeartbeatStats {
			st := cons.Stats()
			return telemetry.HeartbeatStats{Texts: st.Texts, Tokens: st.Tokens, Jobs: st.Jobs, Pending: uint64(pending.Load()), InFlight: st.Held}
		})
	}
}
