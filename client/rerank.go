package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/jetembed/jetembed/schema"
)

// Defaults of the rerank and tokenize endpoints of the embed service.
const (
	DefaultRerankEndpoint   = schema.SubjectRerank
	DefaultTokenizeEndpoint = schema.SubjectTokenize
)

// Rerank scores each text against query with BGE-M3's hybrid score
// (see [schema.RerankRequest]) with the default weights, asking the
// fleet's rerank endpoint now (embed.v1.rerank, or
// embed.v1.rerank.<tenant> with a tenant). The scores come in the texts' order: sort
// them by Score for the ranking. It is [Client.RerankRequest] with a fresh
// request.
func (c *Client) Rerank(ctx context.Context, query string, texts ...string) (*schema.RerankResult, error) {
	return c.RerankRequest(ctx, &schema.RerankRequest{V: schema.Version, ID: nuid.Next(), Query: query, Texts: texts})
}

// RerankRequest sends req to the rerank endpoint and waits for the scores
// (bounded by ctx; without a deadline, 10 s). An answer carrying a
// request-level error is returned together with that error, a
// *schema.Error.
func (c *Client) RerankRequest(ctx context.Context, req *schema.RerankRequest) (*schema.RerankResult, error) {
	r := *req
	if r.V == 0 {
		r.V = schema.Version
	}
	if r.ID == "" {
		r.ID = nuid.Next()
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, requestTimeout)
		defer cancel()
	}
	if r.Deadline == "" {
		r.Deadline = callDeadline(ctx)
	}
	data, err := schema.EncodeRerankRequest(&r, c.o.enc)
	if err != nil {
		return nil, fmt.Errorf("rerank %q: %w", r.ID, err)
	}
	reply, err := c.request(ctx, c.tenanted(c.o.rerankEndpoint), data)
	if err != nil {
		return nil, fmt.Errorf("rerank %q: %w", r.ID, err)
	}
	res, err := schema.DecodeRerankResult(reply.Data, schema.EncodingFor(reply.Header.Get(schema.HeaderContentType)))
	if err != nil {
		return nil, fmt.Errorf("%w: rerank %q: %w", ErrBadResult, r.ID, err)
	}
	if res.Error != nil {
		return res, res.Error
	}
	return res, nil
}

// Tokenize asks the fleet's tokenize endpoint for the model's tokens of
// texts, special tokens included.
func (c *Client) Tokenize(ctx context.Context, texts ...string) (*schema.TokenizeResult, error) {
	return c.TokenizeRequest(ctx, &schema.TokenizeRequest{V: schema.Version, ID: nuid.Next(), Texts: texts})
}

// TokenizeRequest sends req to the tokenize endpoint, as
// [Client.RerankRequest] does.
func (c *Client) TokenizeRequest(ctx context.Context, req *schema.TokenizeRequest) (*schema.TokenizeResult, error) {
	r := *req
	if r.V == 0 {
		r.V = schema.Version
	}
	if r.ID == "" {
		r.ID = nuid.Next()
	}
	data, err := schema.EncodeTokenizeRequest(&r, c.o.enc)
	if err != nil {
		return nil, fmt.Errorf("tokenize %q: %w", r.ID, err)
	}
	reply, err := c.request(ctx, c.tenanted(c.o.tokenizeEndpoint), data)
	if err != nil {
		return nil, fmt.Errorf("tokenize %q: %w", r.ID, err)
	}
	res, err := schema.DecodeTokenizeResult(reply.Data, schema.EncodingFor(reply.Header.Get(schema.HeaderContentType)))
	if err != nil {
		return nil, fmt.Errorf("%w: tokenize %q: %w", ErrBadResult, r.ID, err)
	}
	if res.Error != nil {
		return res, res.Error
	}
	return res, nil
}

// callDeadline is ctx's deadline in the wire format.
func callDeadline(ctx context.Context) string {
	d, _ := ctx.Deadline()
	return d.UTC().Format(time.RFC3339Nano)
}

// tenanted is subject followed by the client's tenant, if it has one
// (embed.v1.rerank.<tenant>), as [Client.Endpoint] is.
func (c *Client) tenanted(subject string) string {
	if c.o.tenant == "" {
		return subject
	}
	return subject + "." + c.o.tenant
}

// request sends data to subject in the client's encoding and waits for
// the reply (10 s without a deadline on ctx).
func (c *Client) request(ctx context.Context, subject string, data []byte) (*nats.Msg, error) {
	h := nats.Header{schema.HeaderContentType: []string{c.o.enc.ContentType()}}
	injectHeaders(ctx, h)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, requestTimeout)
		defer cancel()
	}
	reply, err := c.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Header: h, Data: data})
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("%w on %s: %w", ErrNoService, subject, err)
	}
	return reply, err
}
