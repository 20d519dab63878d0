package consumer

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"strings"

	"github.com/jetembed/jetembed/schema"
)

// deadLetterID is the dedupe id of a job's dead letter for code: a hash of
// the job as it arrived (its tenant and subject, id, the reply it named
// however long, the body), so that a job terminated twice (its TERM lost)
// is stored once while two jobs that share an id are both kept, and no
// tenant can make another's dead letter a duplicate of its own.
func deadLetterID(code string, j *job) string {
	h := sha256.New()
	field := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field(code)
	field(j.tenant)
	field(j.d.Subject)
	field(j.id)
	field(j.d.Reply)
	field(header(j.d.Header, schema.HeaderReply))
	// A replayed job that fails again is a new letter.
	field(header(j.d.Header, schema.HeaderReplay))
	h.Write(j.d.Data)
	return "dlq-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// boundID cuts an id over the id limit (a job refused for it) so that a
// dead letter's headers stay small.
func (c *Loop) boundID(id string) string {
	if len(id) <= c.cfg.Limits.MaxIDBytes {
		return id
	}
	return strings.ToValidUTF8(id[:c.cfg.Limits.MaxIDBytes], "") + "..."
}

// boundHeader returns the job's headers for its dead letter with an
// Embed-Reply value over the reply limit cut to it: the copy keeps what the
// producer sent, but a 5 KB subject does not travel on in headers. The body
// is copied unchanged.
func (c *Loop) boundHeader(h map[string][]string) map[string][]string {
	limit := c.cfg.Replies.MaxBytes
	var out map[string][]string
	for k, vs := range h {
		if !strings.EqualFold(k, schema.HeaderReply) {
			continue
		}
		for i, v := range vs {
			if len(v) <= limit {
				continue
			}
			if out == nil {
				out = make(map[string][]string, len(h))
				for k2, v2 := range h {
					out[k2] = v2
				}
			}
			cut := make([]string, len(vs))
			copy(cut, vs)
			cut[i] = strings.ToValidUTF8(v[:limit], "") + "..."
			out[k], vs = cut, cut
		}
	}
	if out == nil {
		return h
	}
	return out
}

// DLQExcerptBytes is how much of a job that can never succeed its dead
// letter keeps: of the body, and of the headers together. A flood of
// large malformed jobs must not fill the DLQ with copies of themselves.
const DLQExcerptBytes = 4 << 10

// excerptOnly reports whether the dead letter of code keeps an excerpt: the
// job itself is refused (bad input, a reply the policy refuses, a result
// over the limits), so no replay of the same bytes could succeed. The
// others (retries exhausted, a result not published or denied) keep the
// whole job, to be replayed.
func excerptOnly(code string) bool {
	switch c := schema.Code(code); {
	case badInput(c), c == schema.CodeBadReply, c == schema.CodeResultTooLarge:
		return true
	}
	return false
}

// letterBody returns what a job's dead letter keeps of its body and
// headers, filling dl's body facts: everything, or for an excerpt-only
// code the first DLQExcerptBytes of the body and of the headers (the
// subject the job came on first, then the others by name).
func (c *Loop) letterBody(dl *DeadLetter, j *job) (map[string][]string, []byte) {
	sum := sha256.Sum256(j.d.Data)
	dl.BodySize, dl.BodySHA256 = len(j.d.Data), hex.EncodeToString(sum[:])
	h, data := c.boundHeader(j.d.Header), j.d.Data
	if !excerptOnly(dl.Code) {
		return h, data
	}
	if len(data) > DLQExcerptBytes {
		data, dl.Excerpt = data[:DLQExcerptBytes], true
	}
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		// The subject the job came on first (its key is the
		// publisher's: jetstream.HeaderSubject, Embed-Subject).
		if sa, sb := strings.EqualFold(a, "Embed-Subject"), strings.EqualFold(b, "Embed-Subject"); sa != sb {
			if sa {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	out := make(map[string][]string, len(h))
	room := DLQExcerptBytes
	for _, k := range keys {
		for _, v := range h[k] {
			need := len(k) + len(v)
			if need > room {
				dl.Excerpt = true
				if room <= len(k) {
					room = 0
					break
				}
				v = strings.ToValidUTF8(v[:room-len(k)], "")
				need = room
			}
			out[k] = append(out[k], v)
			room -= need
		}
	}
	return out, data
}
