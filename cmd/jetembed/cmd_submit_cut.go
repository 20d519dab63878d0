package main

import (
	"encoding/json"
	"fmt"

	"github.com/jetembed/jetembed/schema"
)

// jobOverhead is what a job's message holds besides its texts and line ids:
// headers (content type, Nats-Msg-Id, trace context), v, id, outputs,
// truncate, reply, the meta keys.
const jobOverhead = 2048

// jobCut cuts the input into jobs of at most size lines whose message fits
// the server's max payload (and the consumer's job limit): a job ends early
// when the next text would not fit. A text over the per-text byte limit
// fails alone, naming its line; the others still run.
type jobCut struct {
	size    int
	budget  int // bytes of encoded texts and line ids a job may carry
	maxText int
	json    bool
	held    *inputLine // read but left for the next job
}

// newJobCut returns the cut for jobs of size lines on a server whose max
// payload is maxPayload, or a usage error when size exceeds the job limit.
func newJobCut(size int, maxPayload int64, asJSON bool) (jobCut, error) {
	lim := schema.DefaultLimits()
	if size > lim.MaxTexts {
		return jobCut{}, fmt.Errorf("%w: --job-size %d exceeds the consumer's limit of %d texts a job", errUsage, size, lim.MaxTexts)
	}
	budget := lim.MaxJobBytes
	if maxPayload > 0 {
		budget = int(min(int64(budget), maxPayload))
	}
	budget -= jobOverhead
	return jobCut{size: size, budget: budget, maxText: min(lim.MaxTextBytes, budget), json: asJSON}, nil
}

// key names the cut in the run id: the same input cut differently is
// another run.
func (c *jobCut) key() string {
	return fmt.Sprintf("job-size=%d budget=%d json=%v", c.size, c.budget, c.json)
}

// cost is what a line adds to a job's message: its text as encoded, and its
// id in the job's meta.
func (c *jobCut) cost(l *inputLine) int {
	n := len(l.id) + 8
	if c.json {
		b, _ := json.Marshal(l.text)
		return n + len(b)
	}
	return n + len(l.text) + 5
}

// next reads the next job: its lines and the texts to send. A job with no
// lines means the input is done.
func (c *jobCut) next(in *inputReader) (*bulkJob, []string, error) {
	j := &bulkJob{lines: make([]lineMeta, 0, min(c.size, 64))}
	var texts []string
	used := 0
	for len(j.lines) < c.size {
		l := c.held
		c.held = nil
		if l == nil {
			nl, ok := in.next()
			if !ok {
				break
			}
			l = &nl
		}
		if l.err == nil && len(l.text) > c.maxText {
			l.err = schema.Errorf(schema.CodeJobTooLarge, "line %d: text of %d bytes exceeds the limit of %d bytes a text", l.n, len(l.text), c.maxText)
		}
		if l.err == nil {
			cost := c.cost(l)
			if used+cost > c.budget && len(texts) > 0 {
				c.held = l // starts the next job
				break
			}
			used += cost
			texts = append(texts, l.text)
		}
		j.lines = append(j.lines, lineMeta{id: l.id, err: l.err})
	}
	if err := in.Err(); err != nil {
		return nil, nil, fmt.Errorf("read input: %w", err)
	}
	j.texts = len(texts)
	return j, texts, nil
}

// jobMeta records a job's input lines in its meta, so its stored result can
// be written without the input: "lines" the ids of the lines whose texts
// it carries, in order, and "failed" the lines that failed before
// submission ({"at": position among the job's lines, "id", "code",
// "message"}).
func jobMeta(j *bulkJob) map[string]any {
	ids := make([]any, 0, j.texts)
	var failed []any
	for i, l := range j.lines {
		if l.err != nil {
			failed = append(failed, map[string]any{"at": i, "id": l.id, "code": string(l.err.Code), "message": l.err.Message})
			continue
		}
		ids = append(ids, l.id)
	}
	m := map[string]any{"lines": ids}
	if failed != nil {
		m["failed"] = failed
	}
	return m
}
