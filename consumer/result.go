package consumer

import (
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/schema"
)

// assemble builds a job's result from the embeddings of its texts that ran
// (embs[k] is text idx[k] of the job, run in a chunk padded to seq[k], or
// taken from the cache or an identical text of the job as from[k] says:
// those count their tokens, not padded ones). It
// returns the job-level error instead when any text met a retriable refusal:
// the whole job is then tried again, since a partial result would be final.
func (c *Loop) assemble(j *job, embs []engine.Embedding, seq, idx []int, from []textFrom) (*schema.Result, error) {
	for _, e := range embs {
		if e.Err != nil && (e.Err.Retriable || e.Err.Code.Retriable()) {
			return nil, e.Err
		}
	}
	sj := j.wire
	res := &schema.Result{V: schema.Version, ID: j.id, Model: c.model, Items: make([]schema.Item, len(sj.Texts))}
	res.EchoMeta(sj)
	for i, e := range j.items {
		if e != nil {
			res.Items[i].Error = e
		}
	}
	want := j.outputs()
	for k := range embs {
		e := &embs[k]
		res.Items[idx[k]] = e.Item(want)
		if e.Err == nil {
			n := c.runTokens(e, seq[k])
			res.Usage.Tokens += n
			res.Usage.PaddedTokens += seq[k]
			if k < len(from) && from[k] == fromCache {
				res.Usage.Cached++
				res.Usage.CachedTokens += n
			}
		}
	}
	if res.Usage.Cached > 0 {
		c.cache.hits.Add(uint64(res.Usage.Cached))
		c.cache.hitTokens.Add(uint64(res.Usage.CachedTokens))
	}
	return res, nil
}

// runTokens is how many real tokens a text ran: its count, or the model's
// maximum when it was cut, never more than the chunk's padded length.
func (c *Loop) runTokens(e *engine.Embedding, seq int) int {
	n := e.Tokens
	if e.Truncated && c.maxTokens > 0 {
		n = min(n, c.maxTokens)
	}
	if seq > 0 {
		n = min(n, seq)
	}
	return n
}
