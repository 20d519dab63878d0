package consumer

import (
	"context"
	"time"

	"github.com/jetembed/jetembed/schema"
)

// Message is the acknowledgement side of one delivery. nats.go's
// jetstream.Msg satisfies it; request-reply deliveries have none (a nil
// Delivery.Msg), or a no-op twin.
type Message interface {
	Ack() error
	Nak() error
	NakWithDelay(delay time.Duration) error
	InProgress() error
	Term() error
}

// Delivery is one job as it arrived: the payload, its headers and the
// delivery facts the loop needs. Package jetstream builds it from a
// JetStream message or a micro request.
type Delivery struct {
	Msg    Message
	Data   []byte
	Header map[string][]string
	// Subject is the subject the job was published on. A queued job's
	// tenant is read from it (see [schema.Tenancy]): the server's
	// permissions vouch for the subject, nothing vouches for the body.
	Subject string
	// Tenant is, for a request-reply delivery, the tenant its subject
	// names (embed.v1.embed.<tenant>), "" on the service's bare subject.
	// Queued jobs leave it empty: their tenant comes from Subject.
	Tenant string
	// NumDelivered is the JetStream delivery count (1 on first delivery; 1
	// for request-reply).
	NumDelivered uint64
	// Stream and Sequence are the stream that stores the job and its
	// sequence there ("" and 0 for a request): a redelivery has the same,
	// the same job published again its own. They are the identity of the
	// job's usage record ([UsageRecorder]), so that a job is counted once
	// however often it is delivered, and a producer cannot have two jobs
	// counted as one.
	Stream   string
	Sequence uint64
	// Reply is the core reply inbox of a request (micro request-reply or
	// a core request), used when the job names no reply subject.
	Reply string
	// Received is when the delivery reached this process; InProgress
	// heartbeats count from it.
	Received time.Time
	// Stored, when known, is when the stream stored the message (the
	// JetStream metadata timestamp): the queue wait metric counts from it,
	// else from Received.
	Stored time.Time
	// Respond, when set, answers a request-reply delivery directly
	// instead of publishing to a subject (micro.Request.Respond).
	Respond func(header map[string][]string, data []byte) error
	// Answer, when set with Respond, makes the answer of a request-reply
	// delivery from its whole result instead of the wire result: the
	// rerank endpoint answers scores this way, so the vectors never leave
	// the process (and no payload limit or blob applies). It gets error
	// results too.
	Answer func(res *schema.Result) (header map[string][]string, data []byte)
	// Local marks a request made inside this process (the HTTP API of
	// serve): its answer never travels as a message, so the server's max
	// payload does not bound it and no blob is stored.
	Local bool
	// Refusal, when set, is the endpoint's own refusal of a request it
	// decoded itself (a rerank request that is no rerank request, a
	// request whose reply the endpoint may not answer): Data is not
	// decoded as a job, and the delivery is settled with this error after
	// the tenant and reply checks, which come first as for any job (a
	// refused reply is bad_reply: no answer, a dead letter). Bad input
	// gets its dead letter and its answer (through Answer when set).
	Refusal *schema.Error
}

// Publisher sends results and dead letters.
type Publisher interface {
	// PublishResult sends a result to subject. For subjects bound to a
	// stream (async bulk) it returns only after the stream confirmed it;
	// msgID ([schema.ResultMsgID] of the tenant, reply and job id, "" for a
	// job without an id) lets the stream drop a duplicate.
	PublishResult(ctx context.Context, subject, msgID string, header map[string][]string, data []byte) error
	// PublishDLQ stores a copy of a terminated job with the reason.
	PublishDLQ(ctx context.Context, reason DeadLetter, header map[string][]string, data []byte) error
}

// DeadLetter says why a job was terminated.
type DeadLetter struct {
	JobID string
	// Tenant is the job's tenant, as read from its subject ("" for none).
	Tenant string
	// MsgID is the dead letter's dedupe id, derived from the job as it
	// arrived, so that one job is dead-lettered once per code.
	MsgID        string
	Code         string
	Message      string
	NumDelivered uint64
	// BodySize and BodySHA256 (hex) describe the job's body as it
	// arrived; Excerpt is set when the copy keeps only its first
	// [DLQExcerptBytes] (and its headers cut to as many), for a job that
	// can never succeed: such a letter cannot be replayed.
	BodySize   int
	BodySHA256 string
	Excerpt    bool
}
