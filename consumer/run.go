package consumer

import (
	"context"
	"errors"
	"fmt"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/schema"
)

// next waits for admitted jobs and takes them all off the hand-off queue:
// run are the jobs to run, each in its own Embed call (the engine's one
// queue packs their texts with every other call's: nothing waits here to
// be gathered), and expired those whose deadline passed while they waited
// for room. ok is false once ctx is done or Drain began.
func (c *Loop) next(ctx context.Context) (run, expired []*job, ok bool) {
	for {
		c.mu.Lock()
		if ctx.Err() != nil || c.isDraining() {
			c.mu.Unlock()
			return nil, nil, false
		}
		if len(c.queue) > 0 {
			now := c.cfg.Now()
			for _, j := range c.queue {
				if j.expired(now) {
					expired = append(expired, j)
				} else {
					run = append(run, j)
				}
			}
			clear(c.queue)
			c.queue = c.queue[:0]
			c.mu.Unlock()
			return run, expired, true
		}
		c.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-c.draining:
		case <-c.arrived:
		}
	}
}

// runJob embeds one job's texts in its own Embed call (the engine's queue
// packs them with every other call's) and settles the job as soon as they
// are done: no job waits for another.
func (c *Loop) runJob(ctx context.Context, j *job) {
	now := c.cfg.Now()
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
		if j.interactive {
			// The consumer's interactive budget admitted the job: the
			// engine's (in real tokens, which the estimate may undercount)
			// makes it wait, never refuses it.
			runCtx = engine.WithAdmissionWait(engine.WithInteractive(runCtx))
		}
		if c.cfg.MaxResultBytes > 0 {
			runCtx = engine.WithOutputLimit(runCtx, c.cfg.MaxResultBytes)
		}
		// Session runs and their busy time are the engine's to record
		// (engine.Metrics): an Embed call spans queueing and sessions.
		// Identical texts of the job run once, and with a cache only the
		// texts it does not have run (cache.go).
		embs, seq, from, rep, err = c.embedTexts(runCtx, j, texts)
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
			c.cfg.Logger.Error("assembling a result panicked", "job", j.id, "panic", fmt.Sprint(p), "delivered", j.d.NumDelivered)
			res, err = nil, schema.Errorf(schema.CodeInternal, "internal error")
		}
	}()
	return c.assemble(j, embs, seq, idx, from)
}

// embed calls the Embedder, turning a panic into an internal error: a bug
// in one job must not take the process down.
func (c *Loop) embed(ctx context.Context, texts []engine.Text) (embs []engine.Embedding, rep engine.CallReport, err error) {
	defer func() {
		if p := recover(); p != nil {
			c.cfg.Logger.Error("embedder panicked", "panic", fmt.Sprint(p), "texts", len(texts))
			err = fmt.Errorf("consumer: embedder panicked: %v", p)
		}
	}()
	return c.emb.Embed(ctx, texts)
}
