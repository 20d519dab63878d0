package consumer

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
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
	h.Write(j.d.Data)
	return "dlq-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// boundID cuts an id over the id limit (a job refused for it) so that a
// dead letter's headers stay small.
func (c *Consumer) boundID(id string) string {
	if len(id) <= c.cfg.Limits.MaxIDBytes {
		return id
	}
	return strings.ToValidUTF8(id[:c.cfg.Limits.MaxIDBytes], "") + "..."
}

// boundHeader returns the job's headers for its dead letter with an
// Embed-Reply value over the reply limit cut to it: the copy keeps what the
// producer sent, but a 5 KB subject does not travel on in headers. The body
// is copied unchanged.
func (c *Consumer) boundHeader(h map[string][]string) map[string][]string {
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
