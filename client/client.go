package client

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"iter"
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

// New returns a client on nc.
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	js, err := natsjs.New(nc)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return &Client{nc: nc, js: js, o: o, blobs: blobBucket{name: o.blobsBucket}}, nil
}

// Run is the client's run id (see [WithRun]).
func (c *Client) Run() string { return c.o.run }

// JobSubject is where [Client.Submit] publishes jobs: embed.jobs.<run>.
func (c *Client) JobSubject() string { return c.o.jobsPrefix + "." + c.o.run }

// ReplySubject is where the result of job id goes:
// embed.results.<run>.<id>, with an id that is not one subject token
// base64url-encoded behind a "~".
func (c *Client) ReplySubject(id string) string {
	return c.o.resultsPrefix + "." + c.o.run + "." + idToken(id)
}

func idToken(id string) string {
	if id != "" && Token(id) == id {
		return id
	}
	return "~" + base64.RawURLEncoding.EncodeToString([]byte(id))
}

// Submit queues job in the jobs stream, with Nats-Msg-Id =
// [schema.JobMsgID] (its reply subject and id) so a job submitted twice
// within the stream's duplicate window runs once, while another producer's
// job with the same id and its own reply subject is kept. A job
// without a reply subject gets [Client.ReplySubject]; job itself is not
// changed. It returns once the stream stored the job (ack.Duplicate says it
// was already there).
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
	ack, err := c.js.PublishMsg(ctx, &nats.Msg{Subject: c.JobSubject(), Header: h, Data: data})
	if err != nil {
		return nil, fmt.Errorf("submit job %q: %w", j.ID, err)
	}
	return ack, nil
}

// StoredResult is one result read back from the results stream (a blob
// reference already resolved to the whole result).
type StoredResult struct {
	*schema.Result
	// Subject is the subject it was published on.
	Subject string
	// Sequence is its stream sequence; Pending counts the results of the
	// run stored after it when it was delivered.
	Sequence, Pending uint64
}

// Results yields the results of run stored in the results stream, oldest
// first, through an ordered consumer on embed.results.<run>.>, and then
// waits for new ones until ctx ends (or, with [UntilCaughtUp], stops when
// it has read what was stored). A result that does not decode is yielded
// with an error wrapping [ErrBadResult] and the iteration goes on; an error
// that ends it (ctx, the stream) is yielded last.
func (c *Client) Results(ctx context.Context, run string, opts ...ResultsOption) iter.Seq2[StoredResult, error] {
	var o resultsOptions
	for _, opt := range opts {
		opt(&o)
	}
	filter := c.o.resultsPrefix + "." + Token(run) + ".>"
	return func(yield func(StoredResult, error) bool) {
		if o.untilCaughtUp {
			s, err := c.js.Stream(ctx, c.o.resultsStream)
			if err != nil {
				yield(StoredResult{}, fmt.Errorf("results of run %s: %w", run, err))
				return
			}
			info, err := s.Info(ctx, natsjs.WithSubjectFilter(filter))
			if err != nil {
				yield(StoredResult{}, fmt.Errorf("results of run %s: %w", run, err))
				return
			}
			if len(info.State.Subjects) == 0 {
				return
			}
		}
		cc := natsjs.OrderedConsumerConfig{FilterSubjects: []string{filter}}
		if o.after > 0 {
			cc.DeliverPolicy, cc.OptStartSeq = natsjs.DeliverByStartSequencePolicy, o.after+1
		}
		cons, err := c.js.OrderedConsumer(ctx, c.o.resultsStream, cc)
		if err != nil {
			yield(StoredResult{}, fmt.Errorf("results of run %s: %w", run, err))
			return
		}
		it, err := cons.Messages()
		if err != nil {
			yield(StoredResult{}, fmt.Errorf("results of run %s: %w", run, err))
			return
		}
		defer it.Stop()
		for {
			m, err := it.Next(natsjs.NextContext(ctx))
			if err != nil {
				yield(StoredResult{}, fmt.Errorf("results of run %s: %w", run, err))
				return
			}
			sr := StoredResult{Subject: m.Subject()}
			if md, err := m.Metadata(); err == nil {
				sr.Sequence, sr.Pending = md.Sequence.Stream, md.NumPending
			}
			res, err := schema.DecodeResult(m.Data(), schema.EncodingFor(m.Headers().Get(schema.HeaderContentType)))
			if err != nil {
				err = fmt.Errorf("%w: %s (seq %d): %w", ErrBadResult, sr.Subject, sr.Sequence, err)
			} else if res.Blob != nil {
				res, err = c.resolve(ctx, res, schema.EncodingFor(m.Headers().Get(schema.HeaderContentType)))
			}
			sr.Result = res
			if !yield(sr, err) {
				return
			}
			if o.untilCaughtUp && sr.Pending == 0 {
				return
			}
		}
	}
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
// (bounded by ctx; without a deadline, 10 s). A result carrying a job-level
// error is returned together with that error, a *schema.Error; a result
// stored as a blob is fetched and returned whole.
func (c *Client) Request(ctx context.Context, job *schema.Job) (*schema.Result, error) {
	data, err := schema.EncodeJob(job, c.o.enc)
	if err != nil {
		return nil, fmt.Errorf("request job %q: %w", job.ID, err)
	}
	h := nats.Header(schema.JobHeader(job, c.o.enc))
	injectHeaders(ctx, h)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, requestTimeout)
		defer cancel()
	}
	reply, err := c.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: c.o.endpoint, Header: h, Data: data})
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("%w on %s: %w", ErrNoService, c.o.endpoint, err)
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
