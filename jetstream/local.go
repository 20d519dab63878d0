package jetstream

import (
	"context"
	"fmt"
	"time"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/internal/telemetry"
	"github.com/jetembed/jetembed/schema"
)

// Request runs job on this worker's job loop, as the request-reply service
// would run it, but inside the process: no NATS round trip, no reply
// subject, no permission to request the service, nothing the server's max
// payload bounds, and neither the job nor its result is encoded (the HTTP
// API inside serve uses it, so that the embedder user needs no producer's
// grants). The job has no tenant. A result carrying a job-level error is
// returned together with that error, as [Client.Request] does.
func (w *Worker) Request(ctx context.Context, job *schema.Job) (*schema.Result, error) {
	answer := make(chan *schema.Result, 1)
	h := schema.JobHeader(job, schema.EncodingMsgpack)
	telemetry.InjectHeaders(ctx, h)
	res, err := w.local(ctx, job, h, func(res *schema.Result) { answer <- res }, answer)
	if err != nil {
		return nil, fmt.Errorf("request job %q: %w", job.ID, err)
	}
	if res.Error != nil {
		return res, res.Error
	}
	return res, nil
}

// local submits job to the job loop as an in-process request whose
// result answer receives, and waits for it on answers.
func (w *Worker) local(ctx context.Context, job *schema.Job, h map[string][]string, answer func(*schema.Result), answers <-chan *schema.Result) (*schema.Result, error) {
	d := &consumer.Request{
		Arrival: consumer.Arrival{Header: h, Received: time.Now()},
		Job:     job,
		Local:   true,
		Answer: func(res *schema.Result) (map[string][]string, []byte) {
			answer(res)
			return nil, nil
		},
	}
	// A refusal (overloaded, draining) is answered too, before Submit
	// returns.
	if err := w.sink.Submit(ctx, d); err != nil {
		select {
		case res := <-answers:
			return res, nil
		default:
			return nil, err
		}
	}
	select {
	case res := <-answers:
		return res, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Member is this worker's own entry of the request-reply service, as
// client.PingService would read it from $SRV.INFO.
func (w *Worker) Member() client.ServiceMember {
	return client.MemberOf(w.svc.Info())
}

// Rerank scores req on this worker's job loop, as the rerank endpoint
// would, inside the process (nothing encoded). An answer carrying a
// request-level error is returned together with that error.
func (w *Worker) Rerank(ctx context.Context, req *schema.RerankRequest) (*schema.RerankResult, error) {
	maxBytes := w.cfg.Service.RerankBytes
	if maxBytes <= 0 {
		maxBytes = DefaultRerankBytes
	}
	r := *req
	if r.V == 0 {
		r.V = schema.Version
	}
	if se := checkRerank(schema.Limits{}, &r, maxBytes); se != nil {
		return &schema.RerankResult{V: schema.Version, ID: req.ID, Error: se}, se
	}
	job, weights := rerankJob(&r)
	answer := make(chan *schema.Result, 1)
	res, err := w.local(ctx, job, schema.JobHeader(job, schema.EncodingMsgpack), func(res *schema.Result) { answer <- res }, answer)
	if err != nil {
		return nil, fmt.Errorf("rerank %q: %w", req.ID, err)
	}
	out := rerankResult(res, len(r.Texts), weights)
	return out, out.Err()
}

// Tokenize answers req with this worker's tokenizer, inside the process;
// [client.ErrNoService] when it has none.
func (w *Worker) Tokenize(_ context.Context, req *schema.TokenizeRequest) (*schema.TokenizeResult, error) {
	if w.cfg.Service.Tokenizer == nil {
		return nil, fmt.Errorf("tokenize: %w: this worker has no tokenizer", client.ErrNoService)
	}
	r := *req
	if r.V == 0 {
		r.V = schema.Version
	}
	body, err := schema.EncodeTokenizeRequest(&r, schema.EncodingMsgpack)
	if err != nil {
		return nil, fmt.Errorf("tokenize %q: %w", req.ID, err)
	}
	out := tokenize(w.cfg.Service.Tokenizer, w.Member().Model, schema.Limits{}, body, schema.EncodingMsgpack)
	return out, out.Err()
}
