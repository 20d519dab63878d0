package consumer

import "context"

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
