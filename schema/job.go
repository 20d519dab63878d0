package schema

import (
	"fmt"
	"strings"
	"time"
)

// Version is the wire contract version this package speaks.
const Version = 1

// Output is a kind of vector a job asks for.
type Output string

// The outputs of BGE-M3.
const (
	OutputDense   Output = "dense"
	OutputSparse  Output = "sparse"
	OutputColBERT Output = "colbert"
)

// Known reports whether o is one of the outputs of wire contract v1.
func (o Output) Known() bool {
	switch o {
	case OutputDense, OutputSparse, OutputColBERT:
		return true
	}
	return false
}

// ParseOutputs parses a comma-separated list such as "dense,sparse" (the form
// a command line takes). Blanks around names are ignored; an empty string is
// the default, nil. An unknown name is an *Error with [CodeUnknownOutput].
func ParseOutputs(s string) ([]Output, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	outs := make([]Output, 0, len(parts))
	for _, p := range parts {
		o := Output(strings.ToLower(strings.TrimSpace(p)))
		if !o.Known() {
			return nil, Errorf(CodeUnknownOutput, "unknown output %q (want dense, sparse or colbert)", p)
		}
		outs = append(outs, o)
	}
	return outs, nil
}

// Job is one embedding request: a batch of texts that succeed or fail
// together at the job level, each text failing alone at the item level.
//
// The msgpack and JSON field names are the same. A decoded Job always has V
// set: an absent "v" decodes as 1, while an explicit other value (0
// included) is kept so that [Limits.Validate] answers [CodeBadVersion].
type Job struct {
	V     int      `msgpack:"v" json:"v"`
	ID    string   `msgpack:"id" json:"id"`
	Texts []string `msgpack:"texts" json:"texts"`
	// Outputs selects the vectors to compute; empty means dense only.
	Outputs []Output `msgpack:"outputs,omitempty" json:"outputs,omitempty"`
	// Truncate is a pointer because its default is true: nil and true cut a
	// text longer than the model's maximum and flag it, false fails that
	// item with text_too_long. Read it with [Job.Truncates].
	Truncate *bool `msgpack:"truncate,omitempty" json:"truncate,omitempty"`
	// Reply is the subject the result goes to; the Embed-Reply header or a
	// request's reply inbox may supply it instead.
	Reply string `msgpack:"reply,omitempty" json:"reply,omitempty"`
	// Deadline is an optional RFC 3339 timestamp; a job still queued past it
	// is answered with deadline_exceeded instead of being embedded.
	Deadline string `msgpack:"deadline,omitempty" json:"deadline,omitempty"`
	// Priority is the job's scheduling class: empty or [PriorityBulk]
	// (queued behind interactive work, in chunks capped by the latency
	// budget), or [PriorityInteractive] (ahead of bulk work, with its own
	// admission budget: what request-reply calls get). Read it with
	// [Job.Interactive].
	Priority Priority `msgpack:"priority,omitempty" json:"priority,omitempty"`
	// Meta is opaque to jetembed and echoed in the [Result]. A decoded job
	// also keeps meta's bytes as they arrived, which [Result.EchoMeta]
	// echoes unchanged.
	Meta map[string]any `msgpack:"meta,omitempty" json:"meta,omitempty"`

	rawMeta rawMeta
}

// rawMeta is meta's bytes as decoded, in the encoding they came in: a JSON
// object or a msgpack map.
type rawMeta struct {
	data []byte
	enc  Encoding
}

// in returns the bytes when they are in encoding enc, else nil.
func (m rawMeta) in(enc Encoding) []byte {
	if m.enc != enc {
		return nil
	}
	return m.data
}

// Priority is a job's scheduling class.
type Priority string

// The scheduling classes.
const (
	PriorityBulk        Priority = "bulk"
	PriorityInteractive Priority = "interactive"
)

// Known reports whether p is a priority of wire contract v1 (empty is
// bulk).
func (p Priority) Known() bool {
	return p == "" || p == PriorityBulk || p == PriorityInteractive
}

// Interactive reports whether the job asked for the interactive class.
func (j *Job) Interactive() bool { return j.Priority == PriorityInteractive }

// NewJob returns a version 1 job with the default outputs (dense) and
// truncation on.
func NewJob(id string, texts ...string) *Job {
	return &Job{V: Version, ID: id, Texts: texts}
}

// Truncates reports whether texts over the model's maximum are cut (true,
// the default) rather than failed.
func (j *Job) Truncates() bool { return j.Truncate == nil || *j.Truncate }

// Wants reports whether the job asks for output o, applying the default
// (dense only) when Outputs is empty.
func (j *Job) Wants(o Output) bool {
	if len(j.Outputs) == 0 {
		return o == OutputDense
	}
	for _, x := range j.Outputs {
		if x == o {
			return true
		}
	}
	return false
}

// DeadlineTime parses Deadline. It returns the zero time and ok=false when
// there is no deadline, and an *Error with [CodeBadPayload] when Deadline is
// not RFC 3339.
func (j *Job) DeadlineTime() (t time.Time, ok bool, err error) {
	if j.Deadline == "" {
		return time.Time{}, false, nil
	}
	t, err = time.Parse(time.RFC3339Nano, j.Deadline)
	if err != nil {
		return time.Time{}, false, Errorf(CodeBadPayload, "deadline %q is not RFC 3339", j.Deadline)
	}
	return t, true, nil
}

// Expired reports whether the job has a deadline that is not after now.
// A malformed deadline does not expire; [Limits.Validate] rejects it.
func (j *Job) Expired(now time.Time) bool {
	t, ok, err := j.DeadlineTime()
	return err == nil && ok && !now.Before(t)
}

// String identifies the job in logs without its texts.
func (j *Job) String() string {
	return fmt.Sprintf("job %q (%d texts)", j.ID, len(j.Texts))
}
