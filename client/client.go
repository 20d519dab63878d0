package client

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetembed/jetembed/schema"
)

// requestTimeout bounds a request whose context has no deadline.
const requestTimeout = 10 * time.Second

// Client is a producer's handle on jetembed (see the package doc). It is
// safe for concurrent use.
type Client struct {
	nc    *nats.Conn
	js    natsjs.JetStream
	o     options
	blobs blobBucket
}

// New returns a client on nc. With a tenant ([WithTenant]) nc should use
// the tenant's inbox prefix (nats.CustomInboxPrefix("_INBOX_<tenant>")):
// the server's permissions deliver replies only there.
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if o.tenant != "" && !validToken(o.tenant) {
		return nil, fmt.Errorf("client: tenant %q is not one subject token", o.tenant)
	}
	js, err := natsjs.New(nc)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return &Client{nc: nc, js: js, o: o, blobs: blobBucket{name: o.blobsBucket}}, nil
}

// Run is the client's run id (see [WithRun]).
func (c *Client) Run() string { return c.o.run }

// Tenant is the client's tenant (see [WithTenant]), "" for none.
func (c *Client) Tenant() string { return c.o.tenant }

// JobSubject is where [Client.Submit] publishes job id: a subject of its
// own, embed.jobs.<tenant>.<run>.<id> (embed.jobs.<run>.<id> without a
// tenant), with the id as in [Client.ReplySubject].
func (c *Client) JobSubject(id string) string {
	return c.o.jobsPrefix + "." + c.space() + c.o.run + "." + idToken(id)
}

// ReplySubject is where the result of job id goes:
// embed.results.<tenant>.<run>.<id> (embed.results.<run>.<id> without a
// tenant), with an id that is not one subject token base64url-encoded
// behind a "~".
func (c *Client) ReplySubject(id string) string {
	return c.resultsRoot() + "." + c.o.run + "." + idToken(id)
}

// Endpoint is the subject [Client.Request] sends to: the request-reply
// endpoint, followed by the tenant if there is one
// (embed.v1.embed.<tenant>).
func (c *Client) Endpoint() string {
	if c.o.tenant == "" {
		return c.o.endpoint
	}
	return c.o.endpoint + "." + c.o.tenant
}

// space is the tenant token and its dot, or "".
func (c *Client) space() string {
	if c.o.tenant == "" {
		return ""
	}
	return c.o.tenant + "."
}

// resultsRoot is the results subject prefix of the client's tenant.
func (c *Client) resultsRoot() string {
	return strings.TrimSuffix(c.o.resultsPrefix+"."+c.space(), ".")
}

// idOfToken is the job id idToken made tok of ("" if none).
func idOfToken(tok string) string {
	enc, ok := strings.CutPrefix(tok, "~")
	if !ok {
		return tok
	}
	id, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return ""
	}
	return string(id)
}

func idToken(id string) string {
	if id != "" && Token(id) == id {
		return id
	}
	return "~" + base64.RawURLEncoding.EncodeToString([]byte(id))
}

// Submit queues job in the jobs stream on a subject of its own
// ([Client.JobSubject]), expecting that subject to be empty
// (Nats-Expected-Last-Subject-Sequence 0): a job submitted again while it
// is still queued or running is not stored twice, and since a tenant may
// publish only under its own subjects no other producer can occupy them
// (a Nats-Msg-Id would be deduplicated over every producer). A job without
// a reply subject gets [Client.ReplySubject]; job itself is not changed.
// It returns once the stream stored the job; a job already queued returns
// an ack with Duplicate set (and no sequence).
func (c *Client) Submit(ctx context.Context, job *schema.Job) (*natsjs.PubAck, error) {
	j := *job
	if j.V == 0 {
		j.V = schema.Version
	}
	if j.Reply == "" {
		j.Reply = c.ReplySubject(j.ID)
	}
	data, err := schema.EncodeJob(&j, c.o.enc)
	if err != nil {
		return nil, fmt.Errorf("submit job %q: %w", j.ID, err)
	}
	h := nats.Header(schema.JobHeader(&j, c.o.enc))
	injectHeaders(ctx, h)
	ack, err := c.js.PublishMsg(ctx, &nats.Msg{Subject: c.JobSubject(j.ID), Header: h, Data: data},
		natsjs.WithExpectLastSequencePerSubject(0))
	var apiErr *natsjs.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == natsjs.JSErrCodeStreamWrongLastSequence {
		return &natsjs.PubAck{Duplicate: true}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("submit job %q: %w", j.ID, err)
	}
	return ack, nil
}

// Embed asks the request-reply service for the vectors of texts now, with
// the client's outputs (see [WithOutputs]). It is [Client.Request] with a
// fresh job.
func (c *Client) Embed(ctx context.Context, texts ...string) (*schema.Result, error) {
	j := schema.NewJob(nuid.Next(), texts...)
	j.Outputs = c.o.outputs
	return c.Request(ctx, j)
}

// Request sends job to the request-reply endpoint and waits for its result
// (bounded by ctx; without a deadline, 10 s). A job without a deadline
// carries ctx's (see [schema.Job.Deadline]): a busy member keeps it in its
// request queue no longer. A result carrying a job-level
// error is returned together with that error, a *schema.Error; a result
// stored as a blob is fetched and returned whole.
func (c *Client) Request(ctx context.Context, job *schema.Job) (*schema.Result, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, requestTimeout)
		defer cancel()
	}
	if job.Deadline == "" {
		// The member learns how long this caller waits: a request that
		// finds it busy waits in its queue that long at most.
		j := *job
		j.Deadline = callDeadline(ctx)
		job = &j
	}
	data, err := schema.EncodeJob(job, c.o.enc)
	if err != nil {
		return nil, fmt.Errorf("request job %q: %w", job.ID, err)
	}
	h := nats.Header(schema.JobHeader(job, c.o.enc))
	injectHeaders(ctx, h)
	reply, err := c.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: c.Endpoint(), Header: h, Data: data})
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("%w on %s: %w", ErrNoService, c.Endpoint(), err)
	}
	if err != nil {
		return nil, fmt.Errorf("request job %q: %w", job.ID, err)
	}
	enc := schema.EncodingFor(reply.Header.Get(schema.HeaderContentType))
	res, err := schema.DecodeResult(reply.Data, enc)
	if err != nil {
		return nil, fmt.Errorf("%w: result of job %q: %w", ErrBadResult, job.ID, err)
	}
	if res.Blob != nil {
		if res, err = c.resolve(ctx, res, enc); err != nil {
			return nil, err
		}
	}
	if res.Error != nil {
		return res, res.Error
	}
	return res, nil
}
