package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/jetembed/jetembed/schema"
)

// The error types of the OpenAI error body ({"error": {message, type,
// param, code}}), chosen by HTTP status.
const (
	typeInvalidRequest = "invalid_request_error"
	typeAuthentication = "authentication_error"
	typeRateLimit      = "rate_limit_error"
	typeServer         = "server_error"
)

// The gateway's own error codes, beside the wire contract's (which pass
// through as they are).
const (
	codeInvalidAPIKey      = "invalid_api_key"
	codeInvalidJSON        = "invalid_json"
	codeInvalidInput       = "invalid_input"
	codeTokenIDs           = "token_ids_unsupported"
	codeDimensions         = "dimensions_unsupported"
	codeEncodingFormat     = "invalid_encoding_format"
	codeModelNotFound      = "model_not_found"
	codeBodyTooLarge       = "body_too_large"
	codeTooManyInputs      = "too_many_inputs"
	codeColBERTTooLarge    = "colbert_too_large"
	codeNotFound           = "not_found"
	codeMethodNotAllowed   = "method_not_allowed"
	codeGatewayBusy        = "gateway_busy"
	codeNoMember           = "no_member"
	codeTimeout            = "timeout"
	codeFleetError         = "fleet_error"
	codeCanaryFailed       = "canary_failed"
	codeUnsupportedContent = "unsupported_media_type"
	codeUnsupportedCoding  = "unsupported_content_encoding"
	codeClientBusy         = "client_busy"
	codeFleetUnreachable   = "fleet_unreachable"
	codeTooManyConns       = "too_many_connections"
	codeBodyTimeout        = "body_timeout"
	codeInvalidWeights     = "invalid_weights"
	codeNoTokenizer        = "tokenize_unsupported"
	codeNoReranker         = "rerank_unsupported"
	codeUnsupportedOption  = "unsupported_option"
)

// apiError is one answer that is not a success: the HTTP status and the
// OpenAI-shaped body.
type apiError struct {
	Status  int    `json:"-"`
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   any    `json:"param"`
	Code    string `json:"code"`
	// retry is set on answers the client may retry: 429 and 503;
	// retryAfter, when set, is their Retry-After (else the configured
	// one).
	retry      bool
	retryAfter time.Duration
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

// newError returns an apiError whose type follows its status.
func newError(status int, code, format string, args ...any) *apiError {
	return &apiError{Status: status, Code: code, Message: fmt.Sprintf(format, args...), Type: errorType(status),
		retry: status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable}
}

func badParam(param, code, format string, args ...any) *apiError {
	e := newError(http.StatusBadRequest, code, format, args...)
	e.Param = param
	return e
}

func errorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return typeAuthentication
	case status == http.StatusTooManyRequests:
		return typeRateLimit
	case status >= 500:
		return typeServer
	}
	return typeInvalidRequest
}

// codeStatus is the HTTP status of every stable code of the wire contract.
// Codes about the job the gateway built (bad_version, missing_id) are its
// own bugs: 500. A code missing here (a newer fleet) is answered 502.
var codeStatus = map[schema.Code]int{
	schema.CodeBadPayload:        http.StatusBadRequest,
	schema.CodeBadVersion:        http.StatusInternalServerError,
	schema.CodeMissingID:         http.StatusInternalServerError,
	schema.CodeEmptyJob:          http.StatusBadRequest,
	schema.CodeTooManyTexts:      http.StatusRequestEntityTooLarge,
	schema.CodeJobTooLarge:       http.StatusRequestEntityTooLarge,
	schema.CodeUnknownOutput:     http.StatusBadRequest,
	schema.CodeTextTooLong:       http.StatusBadRequest,
	schema.CodeInvalidUTF8:       http.StatusBadRequest,
	schema.CodeShapeNotWarmed:    http.StatusServiceUnavailable,
	schema.CodeEngineUnavailable: http.StatusServiceUnavailable,
	schema.CodeOverloaded:        http.StatusTooManyRequests,
	// The caller's tenant is over its quota: Retry-After is the fleet's.
	schema.CodeQuotaExceeded:    http.StatusTooManyRequests,
	schema.CodeDeadlineExceeded: http.StatusGatewayTimeout,
	schema.CodeInternal:         http.StatusInternalServerError,
	// The fleet refused the gateway's own reply inbox: a deployment
	// mismatch (reply policy, inbox prefix), not the caller's fault.
	schema.CodeBadReply: http.StatusBadGateway,
	// One input's vectors alone are over the server's max payload (the
	// gateway halves a job whose result is too large, down to one text).
	schema.CodeResultTooLarge: http.StatusRequestEntityTooLarge,
}

// CodeStatus is the HTTP status the gateway answers for a stable code of
// the wire contract; ok is false for a code it does not know (answered
// 502, or 503 when the fleet says it is retriable).
func CodeStatus(c schema.Code) (status int, ok bool) {
	status, ok = codeStatus[c]
	return status, ok
}

// maxFleetRetryAfter bounds the retry-after a fleet's answer may ask of
// the gateway's clients.
const maxFleetRetryAfter = time.Hour

// fleetError maps what a fleet call returned to the answer.
func fleetError(err error) *apiError {
	var se *schema.Error
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &se):
		status, ok := codeStatus[se.Code]
		if !ok {
			status = http.StatusBadGateway
			if se.Retriable {
				status = http.StatusServiceUnavailable
			}
		}
		e := newError(status, string(se.Code), "%s", se.Message)
		if se.RetryAfterMS > 0 && e.retry {
			e.retryAfter = time.Duration(min(se.RetryAfterMS, maxFleetRetryAfter.Milliseconds())) * time.Millisecond
		}
		return e
	case errors.Is(err, ErrFleetUnreachable):
		e := newError(http.StatusServiceUnavailable, codeFleetUnreachable, "the gateway lost its connection to the fleet during the call: retry shortly")
		return e
	case errors.Is(err, ErrNoMember):
		return newError(http.StatusServiceUnavailable, codeNoMember, "no member of the embed service answered: the fleet is down or starting")
	case errors.Is(err, context.DeadlineExceeded):
		return newError(http.StatusGatewayTimeout, codeTimeout, "the fleet did not answer within the gateway's timeout")
	case errors.Is(err, context.Canceled):
		// The client hung up; nobody reads this answer.
		return newError(499, codeTimeout, "the call was canceled")
	}
	return newError(http.StatusBadGateway, codeFleetError, "the fleet call failed: %v", err)
}

// itemError fails the whole call for one input's error: the OpenAI shape
// has no per-item errors.
func itemError(index int, e *schema.Error) *apiError {
	status, ok := codeStatus[e.Code]
	if !ok {
		status = http.StatusBadGateway
	}
	ae := newError(status, string(e.Code), "input[%d]: %s", index, e.Message)
	ae.Param = "input"
	return ae
}

// writeError writes e as the OpenAI error body, with Retry-After on the
// answers that ask the client to come back.
func writeError(w http.ResponseWriter, e *apiError, retryAfter int) {
	if e.retry {
		if e.retryAfter > 0 {
			retryAfter = int((e.retryAfter + time.Second - 1) / time.Second)
		}
		w.Header().Set("Retry-After", strconv.Itoa(max(retryAfter, 1)))
	}
	writeJSON(w, e.Status, struct {
		Error *apiError `json:"error"`
	}{e})
}

// writeJSON encodes v before it writes the status: a value JSON cannot
// hold (a NaN in a vector the fleet answered) is answered 502, not 200
// with an empty body.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		e := newError(http.StatusBadGateway, codeFleetError, "the answer cannot be written as JSON: %v", err)
		b, _ = json.Marshal(struct {
			Error *apiError `json:"error"`
		}{e})
		status = e.Status
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// short quotes a value from the request for a message, cut to 64 bytes
// (on a rune boundary) with its length: an answer never echoes more of
// the caller's bytes than that.
func short(s string) string {
	const n = 64
	if len(s) <= n {
		return strconv.Quote(s)
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(s[:cut]), len(s))
}
