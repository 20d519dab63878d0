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
// subject, no permission to request the service and nothing the server's
// max payload bounds (the HTTP API inside serve uses it, so that the
// embedder user needs no producer's grants). The job has no tenant. A
// result carrying a job-level error is returned together with that error,
// as [Client.Request] does.
func (w *Worker) Request(ctx context.Context, job *schema.Job) (*schema.Result, error) {
	data, err := schema.EncodeJob(job, schema.EncodingMsgpack)
	if err != nil {
		return nil, fmt.Errorf("request job %q: %w", job.ID, err)
	}
	answer := make(chan []byte, 1)
	h := schema.JobHeader(job, schema.EncodingMsgpack)
	telemetry.InjectHeaders(ctx, h)
	d := consumer.Delivery{
		Data:         data,
		Header:       h,
		NumDelivered: 1,
		Received:     time.Now(),
		Local:        true,
		Respond: func(_ map[string][]string, data []byte) error {
			answer <- data
			return nil
		},
	}
	// A refusal (overloaded, draining) is answered too, before Submit
	// returns.
	if err := w.sink.Submit(ctx, d); err != nil {
		select {
		case data := <-answer:
			return decodeAnswer(job, data)
		default:
			return nil, fmt.Errorf("request job %q: %w", job.ID, err)
		}
	}
	select {
	case data := <-answer:
		return decodeAnswer(job, data)
	case <-ctx.Done():
		return nil, fmt.Errorf("request job %q: %w", job.ID, ctx.Err())
	}
}

func decodeAnswer(job *schema.Job, data []byte) (*schema.Result, error) {
	res, err := schema.DecodeResult(data, schema.EncodingMsgpack)
	if err != nil {
		return nil, fmt.Errorf("%w: result of job %q: %w", client.ErrBadResult, job.ID, err)
	}
	if res.Error != nil {
		return res, res.Error
	}
	return res, nil
}

// Member is this worker's own entry of the request-reply service, as
// client.PingService would read it from $SRV.INFO.
func (w *Worker) Member() client.ServiceMember {
	return client.MemberOf(w.svc.Info())
}

// Rerank scores req on this worker's job loop, as the rerank endpoint
// would, inside the process. An answer carrying a request-level error is
// returned together with that error.
func (w *Worker) Rerank(ctx context.Context, req *schema.RerankRequest) (*schema.RerankResult, error) {
	maxBytes := w.cfg.Service.RerankBytes
	if maxBytes <= 0 {
		maxBytes = DefaultRerankBytes
	}
	r := *req
	if r.V == 0 {
		r.V = schema.Version
	}
	body, err := schema.EncodeRerankRequest(&r, schema.EncodingMsgpack)
	if err != nil {
		return nil, fmt.Errorf("rerank %q: %w", req.ID, err)
	}
	rr, se := decodeRerank(schema.Limits{}, body, schema.EncodingMsgpack, maxBytes)
	if se != nil {
		return &schema.RerankResult{V: schema.Version, ID: req.ID, Error: se}, se
	}
	job, weights := rerankJob(rr)
	data, err := schema.EncodeJob(job, schema.EncodingMsgpack)
	if err != nil {
		return nil, fmt.Errorf("rerank %q: %w", req.ID, err)
	}
	answer := make(chan *schema.RerankResult, 1)
	d := consumer.Delivery{
		Data:         data,
		Header:       schema.JobHeader(job, schema.EncodingMsgpack),
		NumDelivered: 1,
		Received:     time.Now(),
		Local:        true,
		Respond:      func(map[string][]string, []byte) error { return nil },
		Answer: func(res *schema.Result) (map[string][]string, []byte) {
			answer <- rerankResult(res, len(rr.Texts), weights)
			return nil, nil
		},
	}
	if err := w.sink.Submit(ctx, d); err != nil {
		select {
		case out := <-answer:
			return out, out.Err()
		default:
			return nil, fmt.Errorf("rerank %q: %w", req.ID, err)
		}
	}
	select {
	case out := <-answer:
		return out, out.Err()
	case <-ctx.Done():
		return nil, fmt.Errorf("rerank %q: %w", req.ID, ctx.Err())
	}
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
