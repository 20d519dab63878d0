package schema

import "unicode/utf8"

// Limits bound what a job may ask for. They protect the consumer's memory
// and keep one job from monopolizing a batch; the model's own token limit is
// enforced later, per text, by the engine (truncate or text_too_long).
type Limits struct {
	// MaxTexts is the most texts one job may carry.
	MaxTexts int
	// MaxTextBytes is the largest single text, in bytes.
	MaxTextBytes int
	// MaxJobBytes is the largest encoded job body, and also the most bytes
	// of text one job may carry in total. NATS refuses messages over the
	// server's max_payload (1 MiB by default) before they reach us, so
	// raising this past 1 MiB only helps with a raised max_payload.
	MaxJobBytes int
	// MaxIDBytes is the longest job id, in bytes.
	MaxIDBytes int
}

// Default limits; see [DefaultLimits].
const (
	DefaultMaxTexts     = 1024
	DefaultMaxTextBytes = 256 << 10
	DefaultMaxJobBytes  = 4 << 20
	DefaultMaxIDBytes   = 256
)

// DefaultLimits returns the limits a consumer applies unless configured
// otherwise: 1024 texts, 256 KiB a text, 4 MiB a job, 256-byte ids.
func DefaultLimits() Limits {
	return Limits{
		MaxTexts:     DefaultMaxTexts,
		MaxTextBytes: DefaultMaxTextBytes,
		MaxJobBytes:  DefaultMaxJobBytes,
		MaxIDBytes:   DefaultMaxIDBytes,
	}
}

// WithDefaults returns l with every zero or negative limit replaced by its
// default.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits()
	if l.MaxTexts <= 0 {
		l.MaxTexts = d.MaxTexts
	}
	if l.MaxTextBytes <= 0 {
		l.MaxTextBytes = d.MaxTextBytes
	}
	if l.MaxJobBytes <= 0 {
		l.MaxJobBytes = d.MaxJobBytes
	}
	if l.MaxIDBytes <= 0 {
		l.MaxIDBytes = d.MaxIDBytes
	}
	return l
}

// EstimateTokens is the token estimate every budget of the fleet counts
// in (a member's interactive capacity, the gateway's parts and window):
// len(text)/3 + 2, which over-counts Latin text (about 4 bytes a token)
// and is near for CJK (3 bytes a character, often a token each), so the
// budgets err on the side of memory.
func EstimateTokens(text string) int { return len(text)/3 + 2 }

// CheckPayload returns an *Error with [CodeJobTooLarge] when an encoded job
// of n bytes is over MaxJobBytes, and nil otherwise. Checking before
// decoding keeps a huge body from being parsed at all.
func (l Limits) CheckPayload(n int) *Error {
	l = l.WithDefaults()
	if n > l.MaxJobBytes {
		return Errorf(CodeJobTooLarge, "job body of %d bytes is over the limit of %d", n, l.MaxJobBytes)
	}
	return nil
}

// Validate checks a decoded job. It returns the job-level error, which
// fails the whole job, or nil; and the item errors, indexed like j.Texts,
// nil where a text is fine (the whole slice is nil when every text is).
// Item errors (invalid_utf8) fail only their text: the others still get
// vectors. Item errors are only returned when the job-level error is nil.
//
// Job-level checks, in order: bad_version (V is not 1), missing_id (empty),
// bad_payload (ID over MaxIDBytes, ID not UTF-8, deadline not RFC 3339),
// empty_job (no texts), too_many_texts, job_too_large (one text over
// MaxTextBytes, or all texts together over MaxJobBytes), unknown_output.
func (l Limits) Validate(j *Job) (*Error, []*Error) {
	l = l.WithDefaults()
	switch {
	case j == nil:
		return Errorf(CodeBadPayload, "no job"), nil
	case j.V != Version:
		return Errorf(CodeBadVersion, "version %d is not supported (want %d)", j.V, Version), nil
	case j.ID == "":
		return Errorf(CodeMissingID, "job has no id"), nil
	case len(j.ID) > l.MaxIDBytes:
		return Errorf(CodeBadPayload, "id of %d bytes is over the limit of %d", len(j.ID), l.MaxIDBytes), nil
	case !utf8.ValidString(j.ID):
		return Errorf(CodeBadPayload, "id is not valid UTF-8"), nil
	case len(j.Texts) == 0:
		return Errorf(CodeEmptyJob, "job has no texts"), nil
	case len(j.Texts) > l.MaxTexts:
		return Errorf(CodeTooManyTexts, "job has %d texts, over the limit of %d", len(j.Texts), l.MaxTexts), nil
	}
	if _, _, err := j.DeadlineTime(); err != nil {
		return err.(*Error), nil
	}
	if !j.Priority.Known() {
		return Errorf(CodeBadPayload, "priority %q (want bulk or interactive)", j.Priority), nil
	}
	total := 0
	for i, t := range j.Texts {
		if len(t) > l.MaxTextBytes {
			return Errorf(CodeJobTooLarge, "text %d is %d bytes, over the limit of %d", i, len(t), l.MaxTextBytes), nil
		}
		total += len(t)
	}
	if total > l.MaxJobBytes {
		return Errorf(CodeJobTooLarge, "texts total %d bytes, over the limit of %d", total, l.MaxJobBytes), nil
	}
	for _, o := range j.Outputs {
		if !o.Known() {
			return Errorf(CodeUnknownOutput, "unknown output %q (want dense, sparse or colbert)", o), nil
		}
	}
	var items []*Error
	for i, t := range j.Texts {
		if !utf8.ValidString(t) {
			if items == nil {
				items = make([]*Error, len(j.Texts))
			}
			items[i] = Errorf(CodeInvalidUTF8, "text %d is not valid UTF-8", i)
		}
	}
	return nil, items
}

// DecodeJob is the consumer's admission path: it checks the payload size,
// decodes and validates. jobErr is the job-level failure (nil when the job
// may run); items are the per-text errors as from [Limits.Validate]. The
// Job is returned whenever any of it decoded, even with jobErr set, so an
// error result can carry its id.
func (l Limits) DecodeJob(data []byte, enc Encoding) (j *Job, items []*Error, jobErr *Error) {
	if err := l.CheckPayload(len(data)); err != nil {
		return nil, nil, err
	}
	j, err := DecodeJob(data, enc)
	if err != nil {
		return j, nil, err.(*Error)
	}
	jobErr, items = l.Validate(j)
	return j, items, jobErr
}
