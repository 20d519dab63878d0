package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/schema"
)

// batch is what one Embed call serves: the jobs that run, and those whose
// deadline had passed when they were picked.
type batch struct {
	jobs    []*job
	expired []*job
}

// gather waits for queued jobs and returns a batch once the oldest has
// waited the patience window, or the queue holds MaxBatchTokens or
// MaxBatchJobs. It returns nil when ctx is done or Drain began.
func (c *Consumer) gather(ctx context.Context) *batch {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var wait <-chan time.Time
		c.mu.Lock()
		if ctx.Err() != nil || c.isDraining() {
			c.mu.Unlock()
			return nil
		}
		if len(c.queue) > 0 {
			now := c.cfg.Now()
			left := c.cfg.Patience - now.Sub(c.queue[0].queued)
			if left <= 0 || c.queuedTokens >= c.cfg.MaxBatchTokens || len(c.queue) >= c.cfg.MaxBatchJobs {
				b := c.take(now)
				c.mu.Unlock()
				return b
			}
			if timer == nil {
				timer = time.NewTimer(left)
			} else {
				timer.Reset(left)
			}
			wait = timer.C
		}
		c.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-c.draining:
		case <-c.arrived:
		case <-wait:
		}
	}
}

// take pops jobs from the head of the queue while they fit the batch
// budgets (the first always fits: a job is never split across Embed calls).
// Jobs past their deadline are set aside, not run. c.mu is held.
func (c *Consumer) take(now time.Time) *batch {
	b := &batch{}
	tokens, n := 0, 0
	for n < len(c.queue) {
		j := c.queue[n]
		if j.expired(now) {
			b.expired = append(b.expired, j)
		} else {
			if len(b.jobs) > 0 && (tokens+j.tokens > c.cfg.MaxBatchTokens || len(b.jobs) >= c.cfg.MaxBatchJobs) {
				break
			}
			b.jobs = append(b.jobs, j)
			tokens += j.tokens
		}
		c.queuedTokens -= j.tokens
		n++
	}
	rest := copy(c.queue, c.queue[n:])
	clear(c.queue[rest:])
	c.queue = c.queue[:rest]
	return b
}

// span locates one job's texts in the batch's Embed call: texts[at:at+n]
// are the job's texts that run, whose indexes in the job are idx.
type span struct {
	at  int
	idx []int
}

// runBatch embeds the texts of every job of b in one Embed call, then
// settles the jobs concurrently, each as soon as its result is confirmed.
func (c *Consumer) runBatch(ctx context.Context, b *batch) {
	var wg sync.WaitGroup
	defer wg.Wait()
	finish := func(j *job, res *schema.Result, err error) {
		wg.Go(func() { c.settle(ctx, j, c.decide(j, res, err)) })
	}
	for _, j := range b.expired {
		finish(j, nil, schema.Errorf(schema.CodeDeadlineExceeded, "deadline passed before the job ran"))
	}
	if len(b.jobs) == 0 {
		return
	}
	now := c.cfg.Now()
	n := 0
	for _, j := range b.jobs {
		n += len(j.job.Texts)
	}
	texts, idx := make([]engine.Text, 0, n), make([]int, 0, n)
	spans := make([]span, len(b.jobs))
	for k, j := range b.jobs {
		// The stream's clock is not this host's: a skew must not make a
		// wait negative.
		c.cfg.Metrics.QueueWait(ctx, max(now.Sub(j.since()), 0))
		out, truncate := j.outputs(), j.job.Truncates()
		spans[k].at = len(texts)
		for i, t := range j.job.Texts {
			if i < len(j.items) && j.items[i] != nil {
				continue
			}
			idx = append(idx, i)
			texts = append(texts, engine.Text{Text: t, Outputs: out, Truncate: truncate})
		}
		spans[k].idx = idx[spans[k].at:len(idx):len(idx)]
	}
	c.cfg.Metrics.BatchTexts(ctx, len(texts))

	var (
		embs []engine.Embedding
		rep  engine.Report
		err  error
	)
	if len(texts) > 0 {
		runCtx, runSpan := startRun(ctx, b.jobs, len(texts))
		start := c.cfg.Now()
		embs, rep, err = c.embed(runCtx, texts)
		c.cfg.Metrics.Run(ctx, RunSession, c.cfg.Now().Sub(start))
		endRun(runSpan, rep, err)
		for _, j := range b.jobs {
			j.run = runSpan.SpanContext()
		}
	}
	if err == nil && len(embs) != len(texts) {
		err = fmt.Errorf("consumer: embedder returned %d embeddings for %d texts", len(embs), len(texts))
	}
	if errors.Is(err, engine.ErrClosed) || errors.Is(err, engine.ErrUnavailable) {
		err = schema.Errorf(schema.CodeEngineUnavailable, "engine unavailable")
	}
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, engine.ErrFatal) {
			// A fatal engine error ends the process: its jobs go back at
			// once, for the peers (as at shutdown).
			err = errShutdown
		} else if len(b.jobs) > 1 && !isSchemaError(err) {
			// An internal failure (a bug, a panic) may come from one job's
			// texts; run each job alone so the others do not share its fate.
			c.cfg.Logger.Warn("embed failed, running the batch's jobs one by one", "jobs", len(b.jobs), "err", err)
			for _, j := range b.jobs {
				c.runBatch(ctx, &batch{jobs: []*job{j}})
			}
			return
		}
		for _, j := range b.jobs {
			finish(j, nil, err)
		}
		return
	}
	c.cfg.Metrics.Tokens(ctx, rep.Tokens, rep.PaddedTokens)
	seq := make([]int, len(texts))
	for _, ch := range rep.Chunks {
		c.cfg.Metrics.Chunk(ctx, ch.Batch, ch.Seq)
		for _, i := range ch.Items {
			if i >= 0 && i < len(seq) {
				seq[i] = ch.Seq
			}
		}
	}
	for k, j := range b.jobs {
		sp := spans[k]
		res, jobErr := c.safeAssemble(j, embs[sp.at:sp.at+len(sp.idx)], seq[sp.at:sp.at+len(sp.idx)], sp.idx)
		finish(j, res, jobErr)
	}
}

// safeAssemble is assemble with a panic turned into the job's internal
// error, so one job's bug leaves the rest of the batch alone.
func (c *Consumer) safeAssemble(j *job, embs []engine.Embedding, seq, idx []int) (res *schema.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			c.cfg.Logger.Error("assembling a result panicked", "job", j.id, "panic", fmt.Sprint(p), "delivered", j.d.NumDelivered)
			res, err = nil, schema.Errorf(schema.CodeInternal, "internal error")
		}
	}()
	return c.assemble(j, embs, seq, idx)
}

func isSchemaError(err error) bool {
	var se *schema.Error
	return errors.As(err, &se)
}

// embed calls the Embedder, turning a panic into an internal error: a bug
// in one batch must not take the process down.
func (c *Consumer) embed(ctx context.Context, texts []engine.Text) (embs []engine.Embedding, rep engine.Report, err error) {
	defer func() {
		if p := recover(); p != nil {
			c.cfg.Logger.Error("embedder panicked", "panic", fmt.Sprint(p), "texts", len(texts))
			err = fmt.Errorf("consumer: embedder panicked: %v", p)
		}
	}()
	return c.emb.Embed(ctx, texts)
}
