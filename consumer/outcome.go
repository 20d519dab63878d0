package consumer

import (
	"errors"
	"time"

	"github.com/jetembed/jetembed/schema"
)

// errShutdown is the failure of a job the consumer gives back because it is
// stopping: NAKed without delay so another member of the fleet takes it.
var errShutdown = errors.New("consumer: shutting down")

// errFatal is the failure of a job whose call met a fatal engine error:
// this process is about to exit, and gives the job back for the peers.
var errFatal = errors.New("consumer: fatal engine error")

// handBackDelay is the NAK delay of a job given back after a fatal engine
// error. Not zero: the error strikes while the pull loop still has a
// request open, and a job NAKed without delay is redelivered at once
// straight back to it, to an inbox about to go away, and then waits out
// AckWait. A second is long enough for the loop to stop and short enough
// that a peer takes the job at once. (At shutdown fetching stops before
// jobs are given back, so those are NAKed without delay.)
const handBackDelay = time.Second

// verdict is what happens to the message of a delivery.
type verdict uint8

const (
	verdictAck verdict = iota
	verdictNak
	verdictTerm
)

func (v verdict) String() string {
	switch v {
	case verdictAck:
		return "ack"
	case verdictNak:
		return "nak"
	default:
		return "term"
	}
}

// outcome is the disposition of one delivery: the result to send first (nil
// for none), whether a copy goes to the DLQ, and the verdict. Every job
// reaches its outcome through [Loop.decide] and is settled by
// [Loop.settle]; nothing else ACKs, NAKs or TERMs.
type outcome struct {
	verdict verdict
	delay   time.Duration // NAK only
	result  *schema.Result
	dlq     bool
	// dlqTried is set once the dead letter was sent (or failed).
	dlqTried bool
	// code is the job-level error code, empty on success; reason labels a
	// NAK or TERM in metrics (a code or a Reason* condition).
	code   schema.Code
	reason string
	err    *schema.Error
}

// badInput reports whether code is a job-level refusal of the job itself:
// bad input that no redelivery can fix.
func badInput(code schema.Code) bool {
	switch code {
	case schema.CodeBadPayload, schema.CodeBadVersion, schema.CodeMissingID,
		schema.CodeEmptyJob, schema.CodeTooManyTexts, schema.CodeJobTooLarge,
		schema.CodeUnknownOutput, schema.CodeTextTooLong, schema.CodeInvalidUTF8:
		return true
	}
	return false
}

// decide maps what happened to a job to its outcome. res is the result of a
// job that ran (its items may carry item errors); err is the job-level
// failure, nil on success.
//
//   - success: publish res, ACK.
//   - bad_reply: no result (the reply may not receive one), DLQ, TERM.
//   - bad input, or a result over the result limit: error result, DLQ,
//     TERM. A request-reply job too gets its
//     DLQ copy (it has no message to TERM): DESIGN.md says no bad job is
//     silent, and the DLQ is where operators look for the producer that
//     sends them, whichever way it came.
//   - deadline_exceeded: error result, ACK (the producer gave up on it).
//   - retriable refusal, or internal (a bug or a panic, which might pass on
//     another consumer): NAK with backoff; on the final delivery an error
//     result, DLQ and TERM. Request-reply has no redelivery: it is answered
//     at once.
//   - shutdown: NAK without delay; after a fatal engine error, NAK after
//     [handBackDelay]; request-reply is answered engine_unavailable.
func (c *Loop) decide(j *job, res *schema.Result, err error) outcome {
	if err == nil {
		return outcome{verdict: verdictAck, result: res}
	}
	if shutdown, fatal := errors.Is(err, errShutdown), errors.Is(err, errFatal); shutdown || fatal {
		if j.d.Respond != nil {
			se := schema.Errorf(schema.CodeEngineUnavailable, "consumer is shutting down")
			return outcome{verdict: verdictAck, result: schema.ErrorResult(j.id, se), code: se.Code, err: se}
		}
		out := outcome{verdict: verdictNak, code: schema.CodeEngineUnavailable, reason: ReasonShutdown}
		if fatal {
			out.delay = handBackDelay
		}
		return out
	}
	var se *schema.Error
	if !errors.As(err, &se) {
		se = schema.Errorf(schema.CodeInternal, "internal error")
	}
	out := outcome{code: se.Code, reason: string(se.Code), err: se}
	switch {
	case se.Code == schema.CodeBadReply:
		// Nowhere to send a result: the dead letter is the only trace.
		out.verdict, out.dlq = verdictTerm, true
	case badInput(se.Code) || se.Code == schema.CodeResultTooLarge:
		// result_too_large: the same job makes the same result again.
		out.verdict, out.dlq = verdictTerm, true
		out.result = schema.ErrorResult(j.id, se)
	case se.Code == schema.CodeDeadlineExceeded:
		out.verdict = verdictAck
		out.result = schema.ErrorResult(j.id, se)
	case j.d.Respond != nil:
		out.verdict = verdictAck
		out.result = schema.ErrorResult(j.id, se)
	case c.finalDelivery(j.d.NumDelivered):
		final := *se
		final.Retriable = se.Code.Retriable()
		out.verdict, out.dlq = verdictTerm, true
		out.result = schema.ErrorResult(j.id, &final)
	default:
		out.verdict = verdictNak
		out.delay = c.cfg.NakBackoff.Delay(j.d.NumDelivered)
	}
	return out
}
