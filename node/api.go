package node

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/gateway"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// startAPI runs the HTTP API ([Config.API]) in front of the worker w
// itself; stop (idempotent) shuts it down, finishing its calls, before the
// worker stops. It does nothing without an API.
func (r *Node) startAPI(w *jetstream.Worker, maxPayload int64) (stop func(), err error) {
	a := r.cfg.API
	if a == nil {
		return func() {}, nil
	}
	gc := a.Gateway
	gc.Requester, gc.Pinger = localFleet{w}, localFleet{w}
	if gc.JobBytes <= 0 {
		gc.JobBytes = gateway.JobBytesFor(maxPayload)
	}
	if gc.Logger == nil {
		gc.Logger = r.log
	}
	gw, err := gateway.New(gc)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	// No link to watch: the fleet is this process, whether NATS is up or
	// not.
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := ServeGateway(ctx, gc.Logger, gw, a.Listen)
	if err != nil {
		cancel()
		return nil, err
	}
	return sync.OnceFunc(func() {
		cancel()
		if err := wait(); err != nil {
			r.log.Warn("http api stop", "err", err)
		}
	}), nil
}

// localFleet is the HTTP API's view of this process's own worker.
type localFleet struct{ w *jetstream.Worker }

func (f localFleet) Request(ctx context.Context, job *schema.Job) (*schema.Result, error) {
	return f.w.Request(ctx, job)
}

func (f localFleet) Rerank(ctx context.Context, req *schema.RerankRequest) (*schema.RerankResult, error) {
	return f.w.Rerank(ctx, req)
}

func (f localFleet) Tokenize(ctx context.Context, req *schema.TokenizeRequest) (*schema.TokenizeResult, error) {
	return f.w.Tokenize(ctx, req)
}

func (f localFleet) Ping(context.Context) (gateway.Member, error) {
	return gatewayMember(f.w.Member()), nil
}

func gatewayMember(m client.ServiceMember) gateway.Member {
	return gateway.Member{ID: m.ID, Model: m.Model, Version: m.Version, InteractiveTokens: m.InteractiveTokens, MaxTokens: m.MaxTokens}
}

// ServeGateway listens on addr and serves gw until ctx ends; wait returns
// once the server has finished the calls in flight.
func ServeGateway(ctx context.Context, log *slog.Logger, gw *gateway.Server, addr string) (wait func() error, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http api: %w", err)
	}
	scheme := "http"
	if gw.TLS() {
		scheme = "https"
	}
	log.Info("http api listening", "addr", ln.Addr().String(), "url", scheme+"://"+ln.Addr().String()+"/v1")
	done := make(chan error, 1)
	go func() { done <- gw.Serve(ctx, ln) }()
	return func() error { return <-done }, nil
}
