package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/gateway"
	"github.com/jetembed/jetembed/schema"
)

// GatewayFleet is the HTTP gateway's view of the fleet (`jetembed
// gateway`): request-reply through the producer client (embed, rerank
// and tokenize), liveness and capacity through the service's info
// endpoint of the client's tenant (embed.v1.info.<tenant>, which answers
// only inside the tenant's space: $SRV is for operators).
// It implements gateway.Requester, gateway.Pinger, gateway.Reranker and
// gateway.Tokenizer.
type GatewayFleet struct{ c *client.Client }

// NewGatewayFleet is the fleet c reaches.
func NewGatewayFleet(c *client.Client) GatewayFleet { return GatewayFleet{c} }

// noMember marks "nobody serves the endpoint" as the gateway knows it.
func noMember(err error) error {
	if errors.Is(err, client.ErrNoService) {
		return fmt.Errorf("%w: %w", gateway.ErrNoMember, err)
	}
	return err
}

// Request embeds job on a member of the fleet.
func (f GatewayFleet) Request(ctx context.Context, job *schema.Job) (*schema.Result, error) {
	res, err := f.c.Request(ctx, job)
	return res, noMember(err)
}

// Rerank scores req on a member of the fleet.
func (f GatewayFleet) Rerank(ctx context.Context, req *schema.RerankRequest) (*schema.RerankResult, error) {
	res, err := f.c.RerankRequest(ctx, req)
	return res, noMember(err)
}

// Tokenize tokenizes req on a member of the fleet.
func (f GatewayFleet) Tokenize(ctx context.Context, req *schema.TokenizeRequest) (*schema.TokenizeResult, error) {
	res, err := f.c.TokenizeRequest(ctx, req)
	return res, noMember(err)
}

// Ping is the first member to answer.
func (f GatewayFleet) Ping(ctx context.Context) (gateway.Member, error) {
	m, err := f.c.PingService(ctx)
	if err != nil {
		return gateway.Member{}, noMember(err)
	}
	return gatewayMember(m), nil
}

// memberLinger is how long the gateway waits for more members' answers
// after the first.
const memberLinger = 100 * time.Millisecond

// Members are the members that answer within memberLinger of the first.
func (f GatewayFleet) Members(ctx context.Context) ([]gateway.Member, error) {
	ms, err := f.c.ServiceMembers(ctx, memberLinger)
	if err != nil {
		return nil, noMember(err)
	}
	out := make([]gateway.Member, len(ms))
	for i, m := range ms {
		out[i] = gatewayMember(m)
	}
	return out, nil
}

// WatchLink tells gw whether nc is connected, from nc's status changes
// (re-reading the status, as nats.go drops events when the channel is
// full, and every second besides), until ctx ends.
func WatchLink(ctx context.Context, gw *gateway.Server, nc *nats.Conn) {
	ch := nc.StatusChanged()
	gw.SetConnected(nc.IsConnected())
	go func() {
		defer nc.RemoveStatusListener(ch)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ch:
			case <-t.C:
			}
			gw.SetConnected(nc.IsConnected())
		}
	}()
}
