package schema

import (
	"fmt"
	"time"
)

// Code is a stable error code of the wire contract. Codes are never free
// text: clients switch on them.
type Code string

// The error codes of wire contract v1.
const (
	CodeBadPayload        Code = "bad_payload"
	CodeBadVersion        Code = "bad_version"
	CodeMissingID         Code = "missing_id"
	CodeEmptyJob          Code = "empty_job"
	CodeTooManyTexts      Code = "too_many_texts"
	CodeJobTooLarge       Code = "job_too_large"
	CodeUnknownOutput     Code = "unknown_output"
	CodeTextTooLong       Code = "text_too_long"
	CodeInvalidUTF8       Code = "invalid_utf8"
	CodeBadReply          Code = "bad_reply" // refused by the [ReplyPolicy]: no result is sent
	CodeShapeNotWarmed    Code = "shape_not_warmed"
	CodeEngineUnavailable Code = "engine_unavailable"
	CodeOverloaded        Code = "overloaded"
	CodeDeadlineExceeded  Code = "deadline_exceeded"
	CodeInternal          Code = "internal"
	// CodeResultTooLarge means the encoded result exceeds the server's max
	// payload and blobs are off: final, never retried (it would only be
	// computed again at the same size).
	CodeResultTooLarge Code = "result_too_large"
	// CodeQuotaExceeded means the tenant is over its quota (tokens per
	// minute or in flight): retriable after the error's RetryAfterMS. A
	// queued job is never refused with it (it waits in the stream); a
	// request is.
	CodeQuotaExceeded Code = "quota_exceeded"
)

// Retriable reports whether a job refused with this code may succeed when
// delivered again (it is NAKed with a delay rather than terminated).
func (c Code) Retriable() bool {
	switch c {
	case CodeShapeNotWarmed, CodeEngineUnavailable, CodeOverloaded, CodeQuotaExceeded:
		return true
	}
	return false
}

// Error is an error with a stable code. It is the job-level and item-level
// error of a [Result] on the wire, and the error type every layer returns for
// conditions a client must be able to tell apart.
type Error struct {
	Code      Code   `msgpack:"code" json:"code"`
	Message   string `msgpack:"message" json:"message"`
	Retriable bool   `msgpack:"retriable,omitempty" json:"retriable,omitempty"`
	// RetryAfterMS, when set, is how long to wait before trying again, in
	// milliseconds (quota_exceeded).
	RetryAfterMS int64 `msgpack:"retry_after_ms,omitempty" json:"retry_after_ms,omitempty"`
}

// QuotaExceeded is the refusal of a request whose tenant is over its
// quota: retriable after retryAfter (at least a millisecond).
func QuotaExceeded(retryAfter time.Duration) *Error {
	e := Errorf(CodeQuotaExceeded, "the tenant is over its quota: retry after %v", retryAfter.Round(time.Millisecond))
	e.RetryAfterMS = max(retryAfter.Milliseconds(), 1)
	return e
}

// Errorf returns an *Error with code c; Retriable follows the code.
func Errorf(c Code, format string, args ...any) *Error {
	return &Error{Code: c, Message: fmt.Sprintf(format, args...), Retriable: c.Retriable()}
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Is makes errors.Is match any *Error with the same code, so callers can
// write errors.Is(err, &schema.Error{Code: schema.CodeOverloaded}).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}
