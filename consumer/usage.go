package consumer

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/jetembed/jetembed/internal/telemetry"
	"github.com/jetembed/jetembed/schema"
)

// UsageRecorder keeps what settled jobs cost, durably ([Config.Usage]).
// Package jetstream's Publisher stores each event in the usage stream.
type UsageRecorder interface {
	// RecordUsage stores the usage event of one job under key, its
	// identity (a redelivery of the job has the same key; "" for a
	// request, which is never delivered twice). duplicate reports that
	// an event of that key was stored already: a redelivered job counted
	// by an earlier delivery. It returns only once the store confirmed.
	RecordUsage(ctx context.Context, key string, e schema.UsageEvent) (duplicate bool, err error)
}

// UsageMetrics is the optional ability of a [Metrics] to count usage per
// tenant (telemetry's has it): the jetembed_tenant_* families.
type UsageMetrics interface {
	// TenantUsage counts one job settled for good, once.
	TenantUsage(ctx context.Context, u telemetry.Usage)
	// UsageUnrecorded counts an event the usage store did not take, by
	// what became of the job ([UsageRetried] or [UsageLost]).
	UsageUnrecorded(ctx context.Context, result string)
}

// What became of a job whose usage was not stored.
const (
	// UsageRetried: the job was NAKed; it is counted when it runs again.
	UsageRetried = "retried"
	// UsageLost: the job was settled without it (a request, or the
	// final delivery); /metrics counted it, the usage store did not.
	UsageLost = "lost"
)

// ReasonUsageFailed is the NAK reason of a job whose usage event was not
// stored.
const ReasonUsageFailed = "usage_failed"

// usageKeyVersion starts every usage key, so that a later change of what
// it hashes never meets an older key in the duplicate window.
const usageKeyVersion = "u1-"

// usageKey is the identity of a stored job's usage event: its stream and
// sequence, and when the stream stored it (a stream deleted and made again
// starts its sequences anew). A redelivery has the same; a message
// published again, even with the same body, has its own. "" for a
// delivery with no stream message (a request).
func usageKey(d *Stored) string {
	if d.Sequence == 0 || d.Msg == nil {
		return ""
	}
	return usageKeyVersion + schema.Identity(d.Stream, strconv.FormatUint(d.Sequence, 10), strconv.FormatInt(d.StoredAt.UnixNano(), 10))
}

// recordUsage counts a job settled for good (ACK or TERM; a NAKed job
// comes back and is counted then) once: in the usage store, which drops a
// redelivery's event by its key, and then, unless the store had it
// already, in the per-tenant metrics. It runs after the result is
// confirmed and before the acknowledgement, so a job acknowledged is a job
// counted. An event the store did not take NAKs the job, so that it is
// counted when it runs again; on its final delivery, or for a request,
// the job is settled all the same and the loss counted.
func (c *Loop) recordUsage(ctx context.Context, j *job, out outcome) outcome {
	if out.verdict == verdictNak {
		return out
	}
	e := c.usageOf(j, out)
	if rec := c.cfg.Usage; rec != nil {
		dup, err := rec.RecordUsage(ctx, j.usageKey, e)
		if err != nil {
			// An event the schema refuses (schema.ErrUsageEvent) is
			// refused again on every delivery: the job is settled and
			// the event counted lost, never retried.
			refused := errors.Is(err, schema.ErrUsageEvent)
			level := slog.LevelWarn
			if refused {
				level = slog.LevelError
			}
			c.cfg.Logger.Log(ctx, level, "usage not stored", "job", j.id, "tenant", j.tenant, "delivered", j.delivered, "err", err)
			um, _ := c.cfg.Metrics.(UsageMetrics)
			if refused || j.msg == nil || j.req != nil || c.finalDelivery(j.delivered) {
				if um != nil {
					um.UsageUnrecorded(ctx, UsageLost)
				}
			} else {
				if um != nil {
					um.UsageUnrecorded(ctx, UsageRetried)
				}
				out.verdict, out.reason = verdictNak, ReasonUsageFailed
				out.delay = c.cfg.NakBackoff.Delay(j.delivered)
				return out
			}
		}
		if dup {
			return out
		}
	}
	if um, ok := c.cfg.Metrics.(UsageMetrics); ok {
		um.TenantUsage(ctx, telemetry.Usage{
			Tenant: e.Tenant, Code: e.Code, Texts: e.Texts, Tokens: e.Tokens, PaddedTokens: e.PaddedTokens,
			Compute: time.Duration(e.ComputeSeconds * float64(time.Second)), CachedTexts: e.CachedTexts, CachedTokens: e.CachedTokens,
		})
	}
	return out
}

// usageOf is the usage event of a job settled with out. A job answered
// counts the texts and tokens of its result (where a cached text counts
// too); a job refused or failed counts under its code what it ran.
func (c *Loop) usageOf(j *job, out outcome) schema.UsageEvent {
	e := schema.UsageEvent{
		Tenant: j.tenant, Job: j.id, Code: out.code, Request: j.req != nil,
		Delivered: j.delivered, ComputeSeconds: j.report.Compute.Seconds(),
		Tokens: int64(j.report.Tokens), PaddedTokens: int64(j.report.PaddedTokens),
	}
	if j.wire != nil {
		e.Texts = int64(len(j.wire.Texts))
	}
	if res := out.result; res != nil && res.Error == nil {
		e.Tokens, e.PaddedTokens = int64(res.Usage.Tokens), int64(res.Usage.PaddedTokens)
		e.CachedTexts, e.CachedTokens = cachedOf(res)
	}
	return e
}

// cachedOf returns how many of a result's texts, and of their tokens, the
// fleet's cache answered instead of a model run (assemble, in run.go,
// reports them in the result's usage).
func cachedOf(res *schema.Result) (texts, tokens int64) {
	return int64(res.Usage.Cached), int64(res.Usage.CachedTokens)
}
