package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/internal/telemetry"
	"github.com/jetembed/jetembed/schema"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
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
		// texts it does not have run (embedTexts, below; the cache's
		// lookup and store are in cache.go).
		embs, seq, from, rep, err = c.embedTexts(runCtx, j, texts)
		j.ranReport(rep)
		endRun(runSpan, rep, err)
		j.run = runSpan.SpanContext()
	}
	if err == nil && len(embs) != len(texts) {
		err = errCount(len(embs), len(texts))
	}
	if err == nil && ctx.Err() != nil && cutShort(embs) {
		// The engine answers the texts of a call whose context ended
		// deadline_exceeded item by item: this process stopping (or
		// the job leaving the queue), not the producer's deadline.
		err = ctx.Err()
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

// cutShort reports whether any text was answered deadline_exceeded.
func cutShort(embs []engine.Embedding) bool {
	for _, e := range embs {
		if e.Err != nil && e.Err.Code == schema.CodeDeadlineExceeded {
			return true
		}
	}
	return false
}

// expired reports whether the job's deadline passed at now.
func (j *job) expired(now time.Time) bool {
	return !j.deadline.IsZero() && !j.deadline.After(now)
}

// since is when the job's queue wait began: stored in the stream (for a
// redelivery too, so the wait includes earlier attempts), else received,
// else queued here.
func (j *job) since() time.Time {
	switch {
	case !j.storedAt.IsZero():
		return j.storedAt
	case !j.a.Received.IsZero():
		return j.a.Received
	}
	return j.queued
}

// outputs returns the engine outputs the job asks for.
func (j *job) outputs() engine.Output { return engine.OutputsOf(j.wire.Outputs) }

// A job's trace starts at its producer, whose context arrives in the
// message headers. The run span of a batch serves many jobs, so it cannot be
// a child of each: it links to them instead, and each job's publish span is
// a child of its producer's span that links back to the run (startPublish,
// in settle.go).

// startRun starts the span of one Embed call, linked to the trace of every
// job it serves.
func startRun(ctx context.Context, jobs []*job, texts int) (context.Context, trace.Span) {
	var links []trace.Link
	for _, j := range jobs {
		if sc := trace.SpanContextFromContext(j.producer(context.Background())); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{telemetry.AttrJobID.String(j.id)}})
		}
	}
	return telemetry.Tracer().Start(ctx, string(telemetry.SpanRun), trace.WithLinks(links...),
		trace.WithAttributes(telemetry.AttrTexts.Int(texts)))
}

// producer returns ctx carrying the trace context of the job's producer.
func (j *job) producer(ctx context.Context) context.Context {
	return telemetry.ExtractHeaders(ctx, j.a.Header)
}

// smallJob is the most texts a job deduplicates by comparing them
// pairwise (more go through a map).
const smallJob = 32

// embedTexts embeds a job's texts (all with the job's outputs and
// truncation): each distinct text once; a text another job has in flight
// is waited for (flight.go), one the cache has is taken from it, and the
// rest run in one Embed call. embs, seq (the padded length of the chunk
// that ran a text, 0 for one that did not run) and from are aligned with
// texts; the report's chunk items index texts.
func (c *Loop) embedTexts(ctx context.Context, j *job, texts []engine.Text) (embs []engine.Embedding, seq []int, from []textFrom, rep engine.CallReport, err error) {
	n := len(texts)
	embs, from = make([]engine.Embedding, n), make([]textFrom, n)
	// twin[k] is the first text equal to text k; unique are the firsts.
	// (One allocation for the three: this runs for every job.)
	ints := make([]int, 3*n)
	seq, twin, unique := ints[:n:n], ints[n:2*n:2*n], ints[2*n:2*n:3*n]
	switch {
	case n > smallJob:
		first := make(map[string]int, n)
		for k, t := range texts {
			if f, ok := first[t.Text]; ok {
				twin[k] = f
				continue
			}
			first[t.Text] = k
			twin[k] = k
			unique = append(unique, k)
		}
	default:
		// A few texts: comparing with the firsts so far costs less than
		// a map.
	next:
		for k, t := range texts {
			for _, f := range unique {
				if texts[f].Text == t.Text {
					twin[k] = f
					continue next
				}
			}
			twin[k] = k
			unique = append(unique, k)
		}
	}

	keys := make([]cacheKey, n)
	for _, k := range unique {
		t := texts[k]
		keys[k] = makeCacheKey(c.cacheModel, c.precision, j.tenant, t.Outputs, t.Truncate, c.maxTokens, t.Text)
	}
	lead, mine, theirs := c.flights.claim(unique, keys, n, j.interactive)
	// Every flight this job claimed lands, whatever happens: unanswered,
	// its followers run the text themselves.
	defer func() {
		for _, k := range lead {
			if f := mine[k]; f != nil {
				c.flights.land(keys[k], f, engine.Embedding{}, false, false)
			}
		}
	}()
	landed := func(k int, cached bool) {
		if mine[k] != nil {
			c.flights.land(keys[k], mine[k], embs[k], true, cached)
			mine[k] = nil
		}
	}

	miss := lead
	if c.cfg.Cache != nil && len(lead) > 0 {
		miss = c.lookup(ctx, j.id, texts, lead, keys, embs, from)
		for _, k := range lead {
			if from[k] == fromCache {
				landed(k, true)
			}
		}
	}

	if len(miss) > 0 {
		if rep, err = c.run(ctx, j, texts, miss, twin, embs, seq, from); err != nil {
			return nil, nil, nil, rep, err
		}
		if c.cfg.Cache != nil {
			c.store(ctx, miss, keys, embs)
		}
		for _, k := range miss {
			landed(k, false)
		}
	}
	// A stored job with no Embed call of its own (every text followed or
	// cached) holds budget for the results it waits for all the same: a
	// call of about their tokens that runs nothing, admitted by the one
	// budget, so a flood of one repeated text cannot have the fetch loop
	// take jobs (and hold their results) past it, and its Submit returns
	// once that call is admitted, not when the texts it follows are done.
	if len(miss) == 0 && j.req == nil {
		c.hold(ctx, j, texts, theirs)
	}

	var again []int
	// A job waits for the texts it follows until its own deadline, not
	// the leader's: past it, they go to the engine (below), which answers
	// a call past its deadline deadline_exceeded at once.
	wait := ctx
	if !j.deadline.IsZero() {
		var cancel context.CancelFunc
		wait, cancel = context.WithDeadline(ctx, j.deadline)
		defer cancel()
	}
	for k, f := range theirs {
		if f == nil {
			continue
		}
		select {
		case <-f.done:
		case <-wait.Done():
		}
		switch {
		case isClosed(f.done) && f.ok && f.cached:
			embs[k], from[k] = f.emb, fromCache
		case isClosed(f.done) && f.ok:
			embs[k], from[k] = f.emb, fromTwin
		default:
			again = append(again, k)
		}
	}
	if len(again) > 0 {
		// The job that had them in flight failed (or ctx ended): run them
		// here; an error is the job's own.
		more, err := c.run(ctx, j, texts, again, twin, embs, seq, from)
		rep = mergeReports(rep, more)
		if err != nil {
			return nil, nil, nil, rep, err
		}
	}
	for k := range texts {
		if f := twin[k]; f != k {
			// A twin of a cached text is a cached text too (usage and
			// metering count it so); a twin of a run one ran no model.
			embs[k], from[k] = embs[f], fromTwin
			if from[f] == fromCache {
				from[k] = fromCache
			}
		}
	}
	return embs, seq, from, rep, nil
}

// hold admits the texts j follows as a call that runs nothing
// ([engine.Call.Hold]) of about their tokens, without tokenizing them: a
// text's bytes and its two special tokens, at most the model's longest
// text (a token mostly covers one byte or more; normalization can expand
// a few characters, and the engine clamps a call to its budget, so the
// estimate stays bounded either way). Nothing is held when every
// text it follows is answered already. A refusal (ctx ended, an engine
// without holds) leaves the job unadmitted: its Submit returns when it is
// done.
func (c *Loop) hold(ctx context.Context, j *job, texts []engine.Text, theirs []*flight) {
	n, waiting := 0, false
	for k, f := range theirs {
		if f == nil {
			continue
		}
		waiting = waiting || !isClosed(f.done)
		t := len(texts[k].Text) + 2
		if c.maxTokens > 0 {
			t = min(t, c.maxTokens)
		}
		n += t
	}
	if !waiting || n == 0 {
		return
	}
	call := c.call(j)
	call.Hold, call.OutputLimit, call.Copies = n, 0, nil
	if _, _, err := c.embed(ctx, nil, call); err != nil {
		c.cfg.Logger.Debug("holding budget for followed texts", "job", j.id, "err", err)
	}
}

// run embeds the texts at idx in one Embed call, admitted as runCall says,
// into embs and seq; the report's chunk items index texts.
func (c *Loop) run(ctx context.Context, j *job, texts []engine.Text, idx, twin []int, embs []engine.Embedding, seq []int, from []textFrom) (engine.CallReport, error) {
	in := make([]engine.Text, len(idx))
	for i, k := range idx {
		in[i] = texts[k]
	}
	call, se := c.runCall(j, twin, idx, embs, from)
	if se != nil {
		return engine.CallReport{}, se
	}
	got, rep, err := c.embed(ctx, in, call)
	if err != nil {
		return rep, err
	}
	if len(got) != len(in) {
		return rep, errCount(len(got), len(in))
	}
	for i, k := range idx {
		embs[k] = got[i]
	}
	for ci := range rep.Chunks {
		ch := &rep.Chunks[ci]
		items := make([]int, 0, len(ch.Items))
		for _, i := range ch.Items {
			if i >= 0 && i < len(idx) {
				items = append(items, idx[i])
				seq[idx[i]] = ch.Seq
			}
		}
		ch.Items = items
	}
	return rep, nil
}

// mergeReports adds what a second Embed call of a job ran to the first's.
func mergeReports(a, b engine.CallReport) engine.CallReport {
	a.Chunks = append(a.Chunks, b.Chunks...)
	a.Tokens += b.Tokens
	a.PaddedTokens += b.PaddedTokens
	a.Compute += b.Compute
	return a
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// runCall is how the job's texts that run are admitted: the job's call,
// with the output limit counting every copy of a deduplicated text
// (Copies) and net of the vectors the cache answered, so that a job whose
// result would be too large is refused before anything runs, as it would
// be without deduplication or a cache.
func (c *Loop) runCall(j *job, twin, miss []int, embs []engine.Embedding, from []textFrom) (engine.Call, *schema.Error) {
	call := c.call(j)
	if call.OutputLimit <= 0 {
		return call, nil
	}
	copies := make(map[int]int, len(miss))
	var cached int64
	for _, f := range twin {
		copies[f]++
		if from[f] == fromCache {
			cached += int64(len(embs[f].Dense)+len(embs[f].ColBERT)) * 4
		}
	}
	if cached > call.OutputLimit {
		return call, schema.Errorf(schema.CodeResultTooLarge, "the job's vectors would take at least %d bytes, over the result limit of %d bytes", cached, call.OutputLimit)
	}
	call.OutputLimit -= cached
	repeated := false
	call.Copies = make([]int, len(miss))
	for i, k := range miss {
		call.Copies[i] = copies[k]
		repeated = repeated || copies[k] > 1
	}
	if !repeated {
		call.Copies = nil
	}
	return call, nil
}

// call is how the engine admits j: its class, its tenant, and how long it
// may wait for room. A request waits until its deadline, at most
// [MaxRequestWait], or [Config.RequestWait] without one; a stored job
// until its deadline (the fetch loop waits with it).
func (c *Loop) call(j *job) engine.Call {
	call := engine.Call{Tenant: j.tenant, Deadline: j.deadline, OutputLimit: c.cfg.MaxResultBytes, Admitted: j.markAdmitted}
	if j.interactive {
		call.Class = engine.Interactive
	}
	if j.req != nil {
		call.MaxWait = c.cfg.RequestWait
		if !j.deadline.IsZero() {
			call.MaxWait = MaxRequestWait
		}
	}
	return call
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

// ranReport keeps what a job's Embed call ran, for its usage.
func (j *job) ranReport(rep engine.CallReport) {
	j.report = engine.CallReport{Tokens: rep.Tokens, PaddedTokens: rep.PaddedTokens, Compute: rep.Compute}
}

// endRun records the chunks of the call (or its failure) and ends span.
func endRun(span trace.Span, rep engine.CallReport, err error) {
	for _, ch := range rep.Chunks {
		span.AddEvent("chunk", trace.WithAttributes(telemetry.ChunkShape(ch.Batch, ch.Seq, strconv.Itoa(ch.Session))...))
	}
	span.SetAttributes(telemetry.AttrTokens.Int(rep.Tokens), telemetry.AttrChunkTokens.Int(rep.PaddedTokens))
	if err != nil {
		span.SetStatus(codes.Error, "embed failed")
		var se *schema.Error
		if errors.As(err, &se) {
			span.SetAttributes(telemetry.AttrErrorCode.String(string(se.Code)))
		}
	}
	span.End()
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
