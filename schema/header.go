package schema

import "strings"

// Header names of wire contract v1. Headers let a router or the consumer
// act on a message without decoding its body.
const (
	// HeaderContentType selects the encoding of the body: application/json
	// for JSON, anything else (or nothing) for msgpack.
	HeaderContentType = "Content-Type"
	// HeaderReply is the subject a job's result goes to when the body has
	// no reply field.
	HeaderReply = "Embed-Reply"
	// HeaderDeadline is an RFC 3339 deadline, as the job's deadline field.
	HeaderDeadline = "Embed-Deadline"
	// HeaderMsgID is the JetStream dedupe id; producers set it to the job id
	// and results published to a stream carry it too.
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderErrorCode is set on results that carry a job-level error, to
	// the error's [Code].
	HeaderErrorCode = "Embed-Error-Code"
)

// JobHeader returns the headers a producer sends with a job encoded with
// enc: the Content-Type, the job id as Nats-Msg-Id (JetStream dedupes
// republished jobs within the stream's window) and the deadline, if any.
// The map converts to nats.Header directly.
func JobHeader(j *Job, enc Encoding) map[string][]string {
	h := map[string][]string{
		HeaderContentType: {enc.ContentType()},
		HeaderMsgID:       {j.ID},
	}
	if j.Deadline != "" {
		h[HeaderDeadline] = []string{j.Deadline}
	}
	return h
}

// ResultHeader returns the headers of a result encoded with enc: the
// Content-Type, the job id as Nats-Msg-Id (results published to a stream
// dedupe by job id when a job runs twice) and, for a job-level error, its
// code as Embed-Error-Code.
func ResultHeader(res *Result, enc Encoding) map[string][]string {
	h := map[string][]string{
		HeaderContentType: {enc.ContentType()},
		HeaderMsgID:       {res.ID},
	}
	if res.Error != nil {
		h[HeaderErrorCode] = []string{string(res.Error.Code)}
	}
	return h
}

// ApplyHeader fills the job's Reply and Deadline from the Embed-Reply and
// Embed-Deadline headers when the body left them empty: the body wins. A
// malformed deadline header is kept so that [Limits.Validate] reports it.
func (j *Job) ApplyHeader(h map[string][]string) {
	if j.Reply == "" {
		j.Reply = headerValue(h, HeaderReply)
	}
	if j.Deadline == "" {
		j.Deadline = headerValue(h, HeaderDeadline)
	}
}

// headerValue returns the first value of key. NATS header names are case
// sensitive on the wire, but clients differ in the case they send, so an
// exact match is tried first and then a case-insensitive one.
func headerValue(h map[string][]string, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	for k, v := range h {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return v[0]
		}
	}
	return ""
}
