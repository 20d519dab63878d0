package consumer

import (
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/schema"
)

// assemble builds a job's result from the embeddings of its texts that ran
// (embs[k] is text idx[k] of the job, run in a chunk padded to seq[k]). It
// returns the job-level error instead when any text met a retriable refusal:
// the whole job is then tried again, since a partial result would be final.
func (c *Consumer) assemble(j *job, embs []engine.Embedding, seq, idx []int) (*schema.Result, error) {
	for _, e := range embs {
		if e.Err != nil && (e.Err.Retriable || e.Err.Code.Retriable()) {
			return nil, e.Err
		}
	}
	sj := j.job
	res := &schema.Result{V: schema.Version, ID: j.id, Model: c.model, Items: make([]schema.Item, len(sj.Texts))}
	res.EchoMeta(sj)
	for i, e := range j.items {
		if e != nil {
			res.Items[i].Error = e
		}
	}
	dense, sparse, colbert := sj.Wants(schema.OutputDense), sj.Wants(schema.OutputSparse), sj.Wants(schema.OutputColBERT)
	for k := range embs {
		e := &embs[k]
		it := &res.Items[idx[k]]
		it.Tokens, it.Truncated = e.Tokens, e.Truncated
		if e.Err != nil {
			it.Error = e.Err
			continue
		}
		res.Usage.Tokens += c.runTokens(e, seq[k])
		res.Usage.PaddedTokens += seq[k]
		if dense {
			it.Dense = e.Dense
		}
		if sparse {
			it.Sparse = &schema.Sparse{IDs: e.SparseIDs, Weights: e.SparseWeights}
		}
		if colbert {
			it.ColBERT = colbertRows(e.ColBERT, e.ColBERTDim)
		}
	}
	return res, nil
}

// runTokens is how many real tokens a text ran: its count, or the model's
// maximum when it was cut, never more than the chunk's padded length.
func (c *Consumer) runTokens(e *engine.Embedding, seq int) int {
	n := e.Tokens
	if e.Truncated && c.maxTokens > 0 {
		n = min(n, c.maxTokens)
	}
	if seq > 0 {
		n = min(n, seq)
	}
	return n
}

// colbertRows slices a row-major token x dim matrix into per-token vectors
// sharing its memory.
func colbertRows(m []float32, dim int) []schema.Vector {
	if dim <= 0 || len(m) == 0 {
		return nil
	}
	rows := make([]schema.Vector, len(m)/dim)
	for r := range rows {
		rows[r] = m[r*dim : (r+1)*dim : (r+1)*dim]
	}
	return rows
}
