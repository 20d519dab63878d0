package consumer

import (
	"context"
	"errors"
	"fmt"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/schema"
)

// runJob embeds one job's texts in its own Embed call (the engine's queue
// admits it and packs its texts with every other call's) and settles the
// job as soon as they are done: no job waits for another.
func (c *Loop) runJob(ctx context.Context, j *job) {
	defer j.wake()
	now := c.cfg.Now()
	if j.expired(now) {
		c.settle(ctx, j, c.decide(j, nil, schema.Errorf(schema.CodeDeadlineExceeded, "deadline passed before the job ran")))
		return
	}
	// The stream's clock is not this host's: a skew must not make a wait
	// negative.
	c.cfg.Metrics.QueueWait(ctx, max(now.Sub(j.since()), 0))
	out, truncate := j.outputs(), j.wire.Truncates()
	texts := make([]engine.Text, 0, len(j.wire.Texts))
	idx := make([]int, 0, len(j.wire.Texts))
	for i, t := range j.wire.Texts {
		if i < len(j.items) && j.items[i] != nil {
			continue
		}
		idx = append(idx, i)
		texts = append(texts, engine.Text{Text: t, Outputs: out, Truncate: truncate})
	}
	c.cfg.Metrics.BatchTexts(ctx, len(texts))

	var (
		embs []engine.Embedding
		seq  []int
		from []textFrom
		rep  engine.CallReport
		err  error
	)
	if len(texts) > 0 {
		runCtx, runSpan := startRun(ctx, []*job{j}, len(texts))
		// Session runs and their busy time are the engine's to record
		// (engine.Metrics): an Embed call spans queueing and sessions.
		// Identical texts of the job run once, and with a cache only the
		// texts it does not have run (cache.go).
		embs, seq, from, rep, err = c.embedTexts(runCtx, j, texts)
		j.ranReport(rep)
		endRun(runSpan, rep, err)
		j.run = runSpan.SpanContext()
	}
	if err == nil && len(embs) != len(texts) {
		err = errCount(len(embs), len(texts))
	}
	if errors.Is(err, engine.ErrClosed) || errors.Is(err, engine.ErrUnavailable) {
		err = schema.Errorf(schema.CodeEngineUnavailable, "engine unavailable")
	}
	if err != nil {
		switch {
		case ctx.Err() != nil:
			err = errShutdown
		case errors.Is(err, engine.ErrFatal):
			// A fatal engine error ends the process: its jobs go back
			// for the peers.
			err = errFatal
		}
		c.settle(ctx, j, c.decide(j, nil, err))
		return
	}
	c.cfg.Metrics.Tokens(ctx, rep.Tokens, rep.PaddedTokens)
	for _, ch := range rep.Chunks {
		c.cfg.Metrics.Chunk(ctx, ch.Batch, ch.Seq)
	}
	res, jobErr := c.safeAssemble(j, embs, seq, idx, from)
	c.settle(ctx, j, c.decide(j, res, jobErr))
}

// safeAssemble is assemble with a panic turned into the job's internal
// error, so one job's bug leaves the other jobs alone.
func (c *Loop) safeAssemble(j *job, embs []engine.Embedding, seq, idx []int, from []textFrom) (res *schema.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			c.cfg.Logger.Error("assembling a result panicked", "job", j.id, "panic", fmt.Sprint(p), "delivered", j.delivered)
			res, err = nil, schema.Errorf(schema.CodeInternal, "internal error")
		}
	}()
	return c.assemble(j, embs, seq, idx, from)
}

// embed calls the Embedder, turning a panic into an internal error: a bug
// in one job must not take the process down.
func (c *Loop) embed(ctx context.Context, texts []engine.Text, call engine.Call) (embs []engine.Embedding, rep engine.CallReport, err error) {
	defer func() {
		if p := recover(); p != nil {
			c.cfg.Logger.Error("embedder panicked", "panic", fmt.Sprint(p), "texts", len(texts))
			err = fmt.Errorf("consumer: embedder panicked: %v", p)
		}
	}()
	return c.emb.Embed(ctx, texts, call)
}
