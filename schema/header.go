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
	// HeaderMsgID is the JetStream dedupe id. A job carries [JobMsgID] (its
	// reply and id: the id is the idempotency key of a producer's jobs); a
	// result carries [ResultMsgID].
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderJobID is set on results to the job id, so that a reader can
	// tell whose result it is without decoding the body.
	HeaderJobID = "Embed-Job-Id"
	// HeaderErrorCode is set on results that carry a job-level error, to
	// the error's [Code].
	HeaderErrorCode = "Embed-Error-Code"
	// HeaderReplay marks a job replayed from the dead-letter stream
	// (`jetembed dlq replay`), with the letter's id: its result gets a
	// dedupe id of its own, so the results stream does not drop it as a
	// repeat of the result (an error) the first run stored.
	HeaderReplay = "Embed-Replay"
)

// JobHeader returns the headers a producer sends with a job encoded with
// enc: the Content-Type, [JobMsgID] as Nats-Msg-Id (JetStream dedupes
// republished jobs within the stream's window, and two producers that use
// one id with their own reply subjects never drop each other's jobs) and the
// deadline, if any. The map converts to nats.Header directly.
func JobHeader(j *Job, enc Encoding) map[string][]string {
	h := map[string][]string{
		HeaderContentType: {enc.ContentType()},
	}
	if id := JobMsgID(j.Reply, j.ID); id != "" {
		h[HeaderMsgID] = []string{id}
	}
	if j.Deadline != "" {
		h[HeaderDeadline] = []string{j.Deadline}
	}
	return h
}

// ResultHeader returns the headers of a result sent to reply, encoded with
// enc: the Content-Type, [ResultMsgID] as Nats-Msg-Id (a job that runs twice
// is stored once), the job id as Embed-Job-Id and, for a job-level error,
// its code as Embed-Error-Code.
func ResultHeader(res *Result, reply string, enc Encoding) map[string][]string {
	h := map[string][]string{
		HeaderContentType: {enc.ContentType()},
		HeaderJobID:       {res.ID},
	}
	if id := ResultMsgID(reply, res.ID); id != "" {
		h[HeaderMsgID] = []string{id}
	}
	if res.Error != nil {
		h[HeaderErrorCode] = []string{string(res.Error.Code)}
	}
	return h
}

// ResultMsgID is the dedupe id of the result of job id sent to reply: a
// hash of both, so that a redelivered job's second result is dropped by the
// results stream while two producers that use the same id (with their own
// reply subjects) never collide. It is "" for a job without an id, whose
// results are not deduplicated.
func ResultMsgID(reply, id string) string { return identity("r1-", reply, id) }

// JobMsgID is the dedupe id of job id whose result goes to reply: the same
// hash as [ResultMsgID] under its own prefix, so a producer that publishes a
// job twice has it stored once while another producer's job with the same
// id and its own reply subject is kept. It is "" for a job without an id.
func JobMsgID(reply, id string) string { return identity("j1-", reply, id) }

// identity hashes reply and id (length-prefixed, so no two pairs collide by
// concatenation) into a dedupe id with prefix.
func identity(prefix, reply, id string) string {
	if id == "" {
		return ""
	}
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(reply)))
	h.Write(n[:])
	h.Write([]byte(reply))
	h.Write([]byte(id))
	return prefix + hex.EncodeToString(h.Sum(nil)[:16])
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
