package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetembed/jetembed/internal/telemetry"
	"github.com/jetembed/jetembed/internal/telemetry/export"
	"github.com/jetembed/jetembed/node"
)

func init() {
	register(command{
		name:    "serve",
		summary: "consume embedding jobs from NATS JetStream and answer embed.v1.embed requests",
		run:     runServe,
	})
}

func runServe(ctx context.Context, args []string, io stdio) error {
	sc := addServeCommand(newFlagSet("serve", io), true, true, "off")
	c, done, err := sc.parse(args, io)
	if done || err != nil {
		return err
	}
	log := telemetry.NewLogger(io.err, c.LogLevel, c.LogFormat)
	c.Runtime.NATS = sc.nf.options(log)
	return serve(ctx, io, c)
}

// serve is the whole service: flags parsed into c, the process's
// telemetry, then [node.Run] until ctx ends (SIGTERM) and the drain.
func serve(ctx context.Context, io stdio, c serveConfig) error {
	log := telemetry.NewLogger(io.err, c.LogLevel, c.LogFormat)
	prom, stopTelemetry, err := startTelemetry(ctx)
	if err != nil {
		return err
	}
	defer stopTelemetry()
	rc := c.Runtime
	rc.Logger, rc.MeterProvider, rc.MetricsHandler = log, prom.MeterProvider(), prom.Handler()
	if rc.API != nil {
		rc.API.Gateway.Registerer = prom.Registerer()
	}
	ec := c.Engine
	if rc.Fleet.ShareProbe {
		ec.Engine.Probe = false // the node probes, unless a peer already did
	}
	rc.Open = func(ctx context.Context) (node.Engine, error) {
		o, err := ec.open(ctx, io.err)
		if err != nil {
			return node.Engine{}, err
		}
		return node.Engine{Engine: o.engine, Tokenizer: o.tokenizeFunc(o.engine.MaxTokens()), Notes: []any{"attention", o.attention}}, nil
	}
	return exitCode(node.Run(ctx, rc))
}

// exitCode marks the node's errors for main's exit status: a config
// error is a usage error (2), missing server objects a config error (78).
func exitCode(err error) error {
	switch {
	case errors.Is(err, node.ErrConfig):
		return fmt.Errorf("%w: %w", errUsage, err)
	case errors.Is(err, node.ErrObjects):
		return fmt.Errorf("%w: %w", errConfig, err)
	}
	return err
}

// startTelemetry sets up tracing and the metrics; stop flushes both.
func startTelemetry(ctx context.Context) (*export.Prometheus, func(), error) {
	shutdownTracing, err := export.SetupTracing(ctx, "jetembed", version)
	if err != nil {
		return nil, nil, err
	}
	prom, err := export.NewPrometheus()
	if err != nil {
		return nil, nil, err
	}
	return prom, func() {
		_ = prom.Shutdown(context.Background())
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdownTracing(c)
	}, nil
}
