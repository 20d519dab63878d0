package jetstream

import (
	"context"
	"fmt"
	"time"

	"github.com/jetembed/jetembed/internal/consumer"
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
		return nil, fmt.Errorf("%w: result of job %q: %w", ErrBadResult, job.ID, err)
	}
	if res.Error != nil {
		return res, res.Error
	}
	return res, nil
}

// Member is this worker's own entry of the request-reply service, as
// [PingService] would read it from $SRV.INFO.
func (w *Worker) Member() ServiceMember {
	info := w.svc.Info()
	return ServiceMember{ID: info.ID, Version: info.Version, Model: info.Metadata["model"]}
}
