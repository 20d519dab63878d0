package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jetembed/jetembed/internal/telemetry"
	"github.com/jetembed/jetembed/schema"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// settle carries out an outcome: copy to the DLQ (if asked), send the
// result (if any), then ACK, NAK or TERM the message, record it and free the
// job's budget. The dead letter goes first so that whoever sees an error
// result can find the job in the DLQ, and so that a DLQ copy that cannot be
// stored turns the TERM into a NAK (until the final delivery) before any
// result went out. A result that cannot be sent turns an ACK into a NAK, so
// the job runs again.
func (c *Loop) settle(ctx context.Context, j *job, out outcome) {
	defer c.release(j)
	ctx, span := j.startPublish(ctx)
	defer func() { endPublish(span, out) }()
	defer func() {
		if p := recover(); p != nil {
			// A bug while sending: give the message back rather than leave
			// it to expire; at the final delivery JetStream's own
			// max-deliveries advisory records it.
			c.cfg.Logger.Error("settling a job panicked", "job", j.id, "panic", fmt.Sprint(p), "delivered", j.delivered)
			c.ackMessage(j, outcome{verdict: verdictNak, delay: c.cfg.NakBackoff.Delay(j.delivered)})
		}
	}()
	out = c.deadLetter(ctx, j, out)
	if out.result != nil {
		out = c.sendResult(ctx, j, out)
		// A result lost on the final delivery asks for a dead letter now.
		out = c.deadLetter(ctx, j, out)
	}
	// Counted once, durably, before the message is settled for good.
	out = c.recordUsage(ctx, j, out)
	// Recorded first so that whoever sees the message settled also sees
	// it counted.
	c.record(ctx, j, out)
	c.ackMessage(j, out)
}

// startPublish starts the span that settles one job, as a child of its
// producer's span, linked to the run that computed it (if any).
func (j *job) startPublish(ctx context.Context) (context.Context, trace.Span) {
	texts := 0
	if j.wire != nil {
		texts = len(j.wire.Texts)
	}
	opts := []trace.SpanStartOption{trace.WithAttributes(telemetry.Job(j.id, texts)...)}
	if j.run.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: j.run}))
	}
	return telemetry.Tracer().Start(j.producer(ctx), string(telemetry.SpanPublish), opts...)
}

// deadLetter stores the DLQ copy of a job the outcome terminates, once. When
// that fails before the final delivery, the job is NAKed instead (with no
// result sent), so no terminated job is lost unseen; a request-reply caller
// is answered all the same, having no redelivery.
func (c *Loop) deadLetter(ctx context.Context, j *job, out outcome) outcome {
	if !out.dlq || out.dlqTried || out.verdict != verdictTerm {
		return out
	}
	out.dlqTried = true
	dl := DeadLetter{JobID: j.id, Tenant: j.tenant, Code: string(out.code), NumDelivered: j.delivered}
	if out.err != nil {
		dl.Message = out.err.Message
	}
	switch out.reason {
	case ReasonPublishFailed:
		dl.Code, dl.Message = ReasonPublishFailed, "result not published on the final delivery"
	case ReasonPublishDenied:
		dl.Code, dl.Message = ReasonPublishDenied, "the server denied the result's publish to "+j.replySubject()
	}
	dl.JobID, dl.MsgID = c.boundID(j.id), deadLetterID(dl.Code, j)
	h, data := c.letterBody(&dl, j)
	err := c.pub.PublishDLQ(ctx, dl, h, data)
	if err == nil {
		return out
	}
	c.cfg.Logger.Error("dead letter not stored", "job", j.id, "code", dl.Code, "delivered", j.delivered, "err", err)
	if c.finalDelivery(j.delivered) || j.req != nil {
		return out
	}
	out.verdict, out.reason, out.result = verdictNak, ReasonDLQFailed, nil
	out.delay = c.cfg.NakBackoff.Delay(j.delivered)
	return out
}

// sendResult encodes and sends out.result to the job's reply, returning the
// outcome as changed by a failure.
func (c *Loop) sendResult(ctx context.Context, j *job, out outcome) outcome {
	res := out.result
	res.V, res.ID = schema.Version, j.id
	if res.Model == "" {
		res.Model = c.model
	}
	if res.Meta == nil {
		res.EchoMeta(j.wire)
	}
	if r := j.req; r != nil && r.Answer != nil {
		h, data := r.Answer(res)
		if limit := c.payloadLimit(); limit > 0 && !r.Local && msgSize(h, data)+headerRoom > limit {
			// An answer the server would refuse is never sent to be lost:
			// the caller hears result_too_large (and splits its request).
			size := msgSize(h, data) + headerRoom
			se := schema.Errorf(schema.CodeResultTooLarge, "the answer of %d bytes exceeds the server's max payload of %d bytes: send fewer texts a request", size, limit)
			c.cfg.Logger.Warn("answer too large", "job", j.id, "bytes", size, "max_payload", limit)
			if out, _, _ = c.refuseResult(ctx, j, res, h, se, 0); out.result == nil {
				return out
			}
			h, data = r.Answer(out.result)
		}
		if r.Respond == nil {
			return out // answered in this process
		}
		if err := r.Respond(h, data); err != nil {
			c.cfg.Logger.Warn("answer not sent", "job", j.id, "err", err)
			return c.publishFailed(j, out, err)
		}
		return out
	}
	data, err := schema.EncodeResult(res, j.enc)
	if err != nil {
		// JSON cannot carry NaN: a model bug, not the client's. Answer
		// internal; that result always encodes.
		c.cfg.Logger.Error("result does not encode", "job", j.id, "encoding", j.enc, "err", err)
		out = c.decide(j, nil, schema.Errorf(schema.CodeInternal, "result does not encode"))
		if out.result == nil {
			return out
		}
		out.result.Model = c.model
		out.result.EchoMeta(j.wire)
		if data, err = schema.EncodeResult(out.result, j.enc); err != nil {
			out.result = nil
			return out
		}
		res = out.result
	}
	h := schema.ResultHeader(res, j.tenant, j.reply, j.enc)
	if id := j.resultMsgID(); id != "" && j.reply != "" {
		h[schema.HeaderMsgID] = []string{id}
	}
	telemetry.InjectHeaders(ctx, h)
	if most := c.cfg.MaxResultBytes; most > 0 && int64(len(data)) > most && out.code == "" {
		// The engine refuses what it can foresee (Call.OutputLimit); this
		// is the encoded size: JSON, sparse vectors, meta.
		se := schema.Errorf(schema.CodeResultTooLarge, "result of %d bytes exceeds the result limit of %d bytes", len(data), most)
		c.cfg.Logger.Warn("result too large", "job", j.id, "bytes", len(data), "max_result_bytes", most)
		var send bool
		if out, data, send = c.refuseResult(ctx, j, res, h, se, c.payloadLimit()); !send {
			return out
		}
		h[schema.HeaderErrorCode] = []string{string(out.code)}
	}
	if limit := c.payloadLimit(); limit > 0 && !j.local() && msgSize(h, data)+headerRoom > limit {
		var send bool
		if out, data, send = c.oversized(ctx, j, out, res, h, data, limit); !send {
			return out
		}
		if out.code == schema.CodeResultTooLarge {
			h[schema.HeaderErrorCode] = []string{string(out.code)}
		}
	}
	start := c.cfg.Now()
	switch {
	case j.req != nil && j.req.Respond != nil:
		err = j.req.Respond(h, data)
	case j.req != nil:
		return out
	case j.reply != "":
		err = c.pub.PublishResult(ctx, j.reply, j.resultMsgID(), h, data)
	default:
		if c.noReplyWarned.CompareAndSwap(false, true) {
			c.cfg.Logger.Warn("job has no reply subject: result discarded (logged once)", "job", j.id)
		} else {
			c.cfg.Logger.Debug("job has no reply subject: result discarded", "job", j.id)
		}
		return out
	}
	if err != nil {
		level := slog.LevelWarn
		if errors.Is(err, ErrPublishDenied) {
			level = slog.LevelError
		}
		c.cfg.Logger.Log(ctx, level, "result not published", "job", j.id, "reply", j.replySubject(), "delivered", j.delivered, "err", err)
		return c.publishFailed(j, out, err)
	}
	c.cfg.Metrics.Publish(ctx, c.cfg.Now().Sub(start))
	return out
}

// payloadLimit is the largest body with header h that fits, or 0 when the
// publisher does not know the limit.
func (c *Loop) payloadLimit() int64 {
	if pl, ok := c.pub.(PayloadLimiter); ok {
		return pl.MaxPayload()
	}
	return 0
}

// local reports whether the job is a request made inside this process.
func (j *job) local() bool { return j.req != nil && j.req.Local }

// msgSize is the size NATS counts against max_payload: the header block
// (NATS/1.0, one line per value, a blank line) and the body.
func msgSize(h map[string][]string, data []byte) int64 {
	n := len("NATS/1.0\r\n\r\n") + len(data)
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": \r\n") + len(v)
		}
	}
	return int64(n)
}

// ackMessage applies the verdict to the message, once.
func (c *Loop) ackMessage(j *job, out outcome) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.settled {
		return
	}
	j.settled = true
	m := j.msg
	if j.req != nil {
		m = j.req.witness
		if done := j.req.Settled; done != nil {
			defer done() // after the witness, before j.mu is unlocked
		}
	}
	if m == nil {
		return
	}
	var err error
	switch {
	case out.verdict == verdictAck:
		err = m.Ack()
	case out.verdict == verdictTerm:
		err = m.Term()
	case out.delay > 0:
		err = m.NakWithDelay(out.delay)
	default:
		err = m.Nak()
	}
	if err != nil {
		c.cfg.Logger.Warn("message not settled", "job", j.id, "verdict", out.verdict.String(), "err", err)
	}
}

// record counts and logs one settled job: a debug line always, a warning
// for any failure. Texts are never logged.
func (c *Loop) record(ctx context.Context, j *job, out outcome) {
	m := c.cfg.Metrics
	texts := 0
	if j.wire != nil {
		texts = len(j.wire.Texts)
	}
	var o schema.Outcome
	switch out.verdict {
	case verdictNak:
		o = schema.OutcomeNak
		m.Nak(ctx, out.reason)
	case verdictTerm:
		o = schema.OutcomeTerm
		m.Term(ctx, out.reason)
	default:
		o = schema.OutcomeOK
		if out.code != "" {
			o = schema.OutcomeError
		}
	}
	m.JobDone(ctx, o, out.code)
	if o == schema.OutcomeOK && out.result != nil {
		c.recordItems(ctx, out.result)
	} else if texts > 0 {
		m.TextsDone(ctx, o, out.code, texts)
	}
	c.jobs.Add(1)

	level := slog.LevelDebug
	if out.code != "" || out.reason != "" {
		level = slog.LevelWarn
	}
	if !c.cfg.Logger.Enabled(ctx, level) {
		return // the debug line per job costs nothing when off
	}
	attrs := []any{"job", j.id, "verdict", out.verdict.String(), "delivered", j.delivered, "texts", texts}
	if out.code != "" {
		attrs = append(attrs, "code", out.code)
	}
	if out.reason != "" && out.reason != string(out.code) {
		attrs = append(attrs, "reason", out.reason)
	}
	if out.delay > 0 {
		attrs = append(attrs, "delay", out.delay)
	}
	c.cfg.Logger.Log(ctx, level, "job settled", attrs...)
}

// recordItems counts a successful job's texts by item outcome.
func (c *Loop) recordItems(ctx context.Context, res *schema.Result) {
	ok := 0
	var failed map[schema.Code]int
	for i := range res.Items {
		if e := res.Items[i].Error; e != nil {
			if failed == nil {
				failed = make(map[schema.Code]int)
			}
			failed[e.Code]++
			continue
		}
		ok++
	}
	if ok > 0 {
		c.cfg.Metrics.TextsDone(ctx, schema.OutcomeOK, "", ok)
	}
	for code, n := range failed {
		c.cfg.Metrics.TextsDone(ctx, schema.OutcomeError, code, n)
	}
	c.texts.Add(uint64(ok))
	c.tokens.Add(uint64(res.Usage.Tokens))
}

// verdictKey is the span attribute of a job's verdict: ack, nak or term.
const verdictKey = attribute.Key("jetembed.verdict")

// endPublish records the outcome and ends span.
func endPublish(span trace.Span, out outcome) {
	span.SetAttributes(verdictKey.String(out.verdict.String()))
	if out.code != "" {
		span.SetAttributes(telemetry.AttrErrorCode.String(string(out.code)))
	}
	if out.verdict != verdictAck {
		span.SetStatus(codes.Error, out.verdict.String())
	}
	span.End()
}
