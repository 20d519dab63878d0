package consumer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"

	"github.com/jetembed/jetembed/schema"
)

// ErrPublishDenied is what a [Publisher] wraps when the server refused a
// publish (a permission violation): no redelivery can fix it, so the job is
// dead-lettered with [ReasonPublishDenied] and terminated.
var ErrPublishDenied = errors.New("publish denied by the server")

// PayloadLimiter is an optional ability of a [Publisher]: the largest
// message, headers included, the connection may publish (the server's
// max_payload). A result that would not fit goes to [Config.Blobs], or is
// answered result_too_large.
type PayloadLimiter interface {
	MaxPayload() int64
}

// BlobStore keeps results too large for one message ([Config.Blobs]).
type BlobStore interface {
	// PutBlob stores data, a whole encoded result sealed with its key,
	// under name (a new name each time: see blobName) and returns its
	// reference.
	PutBlob(ctx context.Context, name string, header map[string][]string, data []byte) (schema.Blob, error)
}

// headerRoom is what the publisher may still add to a result's headers
// (Nats-Msg-Id, the expected stream, trace context).
const headerRoom = 512

// blobName is the object name of one attempt at a job's result: its
// Nats-Msg-Id (a hash of the job's identity: tenant, reply subject, id and
// replay, see [job.resultMsgID])
// and a random suffix. Every attempt stores a new object under a new key,
// so no blob is ever replaced: not by a redelivery of the job (whose first
// reply, already stored, names the first object and key), and never by
// another tenant's job.
func blobName(j *job) (string, error) {
	var suffix [8]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return "", err
	}
	return j.resultMsgID() + "-" + hex.EncodeToString(suffix[:]), nil
}

// putSealed seals data (reusing its storage) under a fresh key and stores
// it as a new blob: the reference returned carries the key, which travels
// only in the reply.
func (c *Loop) putSealed(ctx context.Context, j *job, h map[string][]string, data []byte) (schema.Blob, error) {
	name, err := blobName(j)
	if err != nil {
		return schema.Blob{}, err
	}
	key, err := schema.NewBlobKey()
	if err != nil {
		return schema.Blob{}, err
	}
	sealed, err := schema.SealBlob(key, name, data)
	if err != nil {
		return schema.Blob{}, err
	}
	blob, err := c.cfg.Blobs.PutBlob(ctx, name, h, sealed)
	if err != nil {
		return schema.Blob{}, err
	}
	blob.Key = key
	return blob, nil
}

// oversized handles a result whose message would exceed the max payload
// (limit): with blobs, the result is stored and a small result naming it
// is returned for sending; without, the job fails result_too_large (DLQ,
// TERM: it would only be computed again at the same size). ok is false when
// nothing is to be sent (out says what happens to the message).
func (c *Loop) oversized(ctx context.Context, j *job, out outcome, res *schema.Result, h map[string][]string, data []byte, limit int64) (outcome, []byte, bool) {
	size := msgSize(h, data) + headerRoom
	if c.cfg.Blobs != nil {
		n := len(data)
		blob, err := c.putSealed(ctx, j, h, data)
		if err != nil {
			c.cfg.Logger.Warn("result blob not stored", "job", j.id, "bytes", n, "delivered", j.delivered, "err", err)
			return c.publishFailed(j, out, err), nil, false
		}
		small := &schema.Result{V: res.V, ID: res.ID, Model: res.Model, Usage: res.Usage, Meta: res.Meta, Blob: &blob}
		small.EchoMeta(j.wire)
		sd, err := schema.EncodeResult(small, j.enc)
		if err == nil && msgSize(h, sd)+headerRoom <= limit {
			c.cfg.Logger.Debug("result stored as a blob", "job", j.id, "bytes", n, "blob", blob.Name)
			return out, sd, true
		}
		size = msgSize(h, sd) + headerRoom
	}
	se := schema.Errorf(schema.CodeResultTooLarge, "result of %d bytes exceeds the server's max payload of %d bytes", size, limit)
	if c.cfg.Blobs == nil {
		se.Message += " (result blobs are off)"
	}
	c.cfg.Logger.Warn("result too large", "job", j.id, "bytes", size, "max_payload", limit)
	return c.refuseResult(ctx, j, res, h, se, limit)
}

// refuseResult fails a job whose result is too large (se, result_too_large:
// over the server's max payload without blobs, or over
// [Config.MaxResultBytes]): DLQ, TERM, and the error result for sending,
// encoded, unless even that does not fit limit (the payload limit, 0 when
// unknown). ok is false when nothing is to be sent.
func (c *Loop) refuseResult(ctx context.Context, j *job, res *schema.Result, h map[string][]string, se *schema.Error, limit int64) (outcome, []byte, bool) {
	out := outcome{verdict: verdictTerm, dlq: true, code: se.Code, reason: string(se.Code), err: se,
		result: schema.ErrorResult(j.id, se)}
	if out = c.deadLetter(ctx, j, out); out.result == nil {
		return out, nil, false
	}
	out.result.Model, out.result.Meta = c.model, res.Meta
	out.result.EchoMeta(j.wire)
	sd, err := schema.EncodeResult(out.result, j.enc)
	if err != nil || limit > 0 && msgSize(h, sd)+headerRoom > limit {
		// Even the error does not fit (a huge meta): the DLQ holds it.
		return out, nil, false
	}
	return out, sd, true
}

// publishFailed turns an outcome whose result could not be sent into a NAK,
// or on the final delivery (or when the server denied the publish) into a
// dead letter and a TERM. A request's lost answer is only counted (NAKed:
// there is no message), since its caller retries. Only a successful
// outcome changes: a TERM or NAK already decided stays.
func (c *Loop) publishFailed(j *job, out outcome, err error) outcome {
	if out.verdict != verdictAck {
		return out
	}
	out.reason = ReasonPublishFailed
	switch {
	case errors.Is(err, ErrPublishDenied):
		out.reason = ReasonPublishDenied
		out.verdict, out.dlq = verdictTerm, true
	case j.req != nil:
		// A request has no message to give back and no redelivery: the
		// requester, unanswered, asks again. Nothing to dead-letter.
		out.verdict = verdictNak
	case c.finalDelivery(j.delivered):
		// No redelivery follows: keep the job in the DLQ rather than lose it.
		out.verdict, out.dlq = verdictTerm, true
	default:
		out.verdict = verdictNak
		out.delay = c.cfg.NakBackoff.Delay(j.delivered)
	}
	return out
}
