package schema

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
)

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
	// HeaderMsgID is the JetStream dedupe id. A result carries
	// [ResultMsgID]. A job carries none: the jobs stream dedupes ids over
	// every producer, so a producer could preempt another's job by sending
	// its id first; a job is deduplicated per subject instead (see
	// [HeaderExpectedLastSubjectSeq]).
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderExpectedLastSubjectSeq, set to 0 on a job published on a
	// subject of its own (embed.jobs.<tenant>.<run>.<id>), makes the jobs
	// stream refuse it while the same job is queued: dedupe inside the
	// subjects the server lets the tenant publish to, which no other
	// tenant can fill.
	HeaderExpectedLastSubjectSeq = "Nats-Expected-Last-Subject-Sequence"
	// HeaderTenant is set on results and dead letters to the job's tenant,
	// as the consumer read it from the job's subject.
	HeaderTenant = "Embed-Tenant"
	// HeaderJobID is set on results to the job id, so that a reader can
	// tell whose result it is without decoding the body.
	HeaderJobID = "Embed-Job-Id"
	// HeaderErrorCode is set on results that carry a job-level error, to
	// the error's [Code].
	HeaderErrorCode = "Embed-Error-Code"
)

// JobHeader returns the headers a producer sends with a job encoded with
// enc: the Content-Type and the deadline, if any. The map converts to
// nats.Header directly.
func JobHeader(j *Job, enc Encoding) map[string][]string {
	h := map[string][]string{
		HeaderContentType: {enc.ContentType()},
	}
	if j.Deadline != "" {
		h[HeaderDeadline] = []string{j.Deadline}
	}
	return h
}

// ResultHeader returns the headers of a result of tenant's job sent to
// reply, encoded with enc: the Content-Type, [ResultMsgID] as Nats-Msg-Id (a
// job that runs twice is stored once), the job id as Embed-Job-Id, the
// tenant as Embed-Tenant and, for a job-level error, its code as
// Embed-Error-Code.
func ResultHeader(res *Result, tenant, reply string, enc Encoding) map[string][]string {
	h := map[string][]string{
		HeaderContentType: {enc.ContentType()},
		HeaderJobID:       {res.ID},
	}
	if id := ResultMsgID(tenant, reply, res.ID); id != "" {
		h[HeaderMsgID] = []string{id}
	}
	if tenant != "" {
		h[HeaderTenant] = []string{tenant}
	}
	if res.Error != nil {
		h[HeaderErrorCode] = []string{string(res.Error.Code)}
	}
	return h
}

// ResultMsgID is the dedupe id of the result of tenant's job id sent to
// reply: a hash of the three, so that a redelivered job's second result is
// dropped by the results stream while two jobs of different tenants, or
// with other reply subjects, never collide, whatever ids and replies they
// name (the tenant is the one the consumer read from the job's subject). It
// is "" for a job without an id, whose results are not deduplicated.
func ResultMsgID(tenant, reply, id string) string {
	if id == "" {
		return ""
	}
	return "r2-" + Identity(tenant, reply, id)
}

// JobMsgID is the identity of tenant's job id whose result goes to reply:
// the same hash as [ResultMsgID] under its own prefix. Do not send it as
// a job's Nats-Msg-Id on a jobs stream that several tenants share: the
// stream dedupes ids over all of them, and the hash is public, so another
// tenant could send it first and have the job dropped. A tenant with a
// jobs stream of its own may. It is "" for a job without an id.
func JobMsgID(tenant, reply, id string) string {
	if id == "" {
		return ""
	}
	return "j2-" + Identity(tenant, reply, id)
}

// Identity hashes fields (each length-prefixed, so that no two lists
// collide by concatenation) into 32 hex digits: the identity of a job
// (tenant, reply, id) in result, blob and dead-letter names.
func Identity(fields ...string) string {
	h := sha256.New()
	var n [8]byte
	for _, f := range fields {
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
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
