package jetstream

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/schema"
)

// ErrNoUsageStream is what [Publisher.RecordUsage] returns when the
// publisher's config names no usage stream.
var ErrNoUsageStream = errors.New("no usage stream configured")

var _ consumer.UsageRecorder = (*Publisher)(nil)

// usagePrefix is a usage stream subject less its wildcard tail.
func usagePrefix(subject string) string {
	return strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(subject, ">"), "*"), ".")
}

// RecordUsage implements [consumer.UsageRecorder]: the event goes to
// <usage prefix>.<tenant> with Nats-Msg-Id set to key, and returns once
// the usage stream stored it, or reports (duplicate) that the stream
// dropped it as a repeat of an event of the same key inside its duplicate
// window: a redelivered job whose first delivery was counted.
func (p *Publisher) RecordUsage(ctx context.Context, key string, e schema.UsageEvent) (duplicate bool, err error) {
	if p.usageName == "" {
		return false, ErrNoUsageStream
	}
	data, err := schema.EncodeUsageEvent(e)
	if err != nil {
		return false, err
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	m := &nats.Msg{Subject: schema.UsageSubject(p.usagePrefix, e.Tenant), Data: data,
		Header: nats.Header{schema.HeaderContentType: []string{"application/json"}}}
	opts := []natsjs.PublishOpt{natsjs.WithExpectStream(p.usageName)}
	if key != "" {
		opts = append(opts, natsjs.WithMsgID(key))
	}
	ack, err := p.js.PublishMsg(ctx, m, opts...)
	if err != nil {
		return false, fmt.Errorf("%w: usage of job %q: %w", ErrNotConfirmed, e.Job, err)
	}
	return ack.Duplicate, nil
}

// UsageQuery selects the usage [ReadUsage] sums.
type UsageQuery struct {
	// Stream is the usage stream; Subject its subject ("" for the
	// defaults of [DefaultConfig]).
	Stream, Subject string
	// Since and Until bound the events by when the stream stored them
	// (zero: from the first, until the last stored when the read began).
	Since, Until time.Time
	// Tenant keeps one tenant's events only ("" every tenant's), Tenants
	// those of several (a tenant under more than one key, JWT mode's key
	// rotation); both may be set.
	Tenant  string
	Tenants []string
	// Total sums each tenant's events over the whole span instead of per
	// hour.
	Total bool
}

// UsageRow is what one tenant used in one hour (or, with
// [UsageQuery.Total], the whole span).
type UsageRow struct {
	// Hour is the hour's start, UTC; zero for a total.
	Hour   time.Time `json:"hour,omitzero"`
	Tenant string    `json:"tenant"`
	// Jobs counts the jobs settled for good, Failed those of them that
	// failed, by error code; Requests the jobs that were request-reply
	// calls.
	Jobs           int64                 `json:"jobs"`
	Failed         map[schema.Code]int64 `json:"failed,omitempty"`
	Requests       int64                 `json:"requests,omitempty"`
	Texts          int64                 `json:"texts"`
	Tokens         int64                 `json:"tokens"`
	PaddedTokens   int64                 `json:"padded_tokens"`
	ComputeSeconds float64               `json:"compute_seconds"`
	CachedTexts    int64                 `json:"cached_texts"`
	CachedTokens   int64                 `json:"cached_tokens"`
}

// UsageReport is the sum of the usage events [ReadUsage] read.
type UsageReport struct {
	// Rows are ordered by hour, then tenant.
	Rows []UsageRow `json:"rows"`
	// Events counts the events summed; Skipped those that were not a
	// usage event (or named another tenant than their subject).
	Events  int64 `json:"events"`
	Skipped int64 `json:"skipped,omitempty"`
}

// usageFetchBytes bounds the bytes of one pull of [ReadUsage]: 512 events
// are ~2 MiB at most, and the pull's subscription holds 64 MiB. (A
// variable for the tests.)
var usageFetchBytes = 16 << 20

// ReadUsage reads the usage stream's events of q, in order, and sums them
// per tenant per hour (of the stream's clock). It reads what the stream
// held when it began, through an ordered consumer, and keeps only the
// sums, so its memory is bounded by hours times tenants.
func ReadUsage(ctx context.Context, js natsjs.JetStream, q UsageQuery) (UsageReport, error) {
	if q.Stream == "" {
		q.Stream = schema.StreamUsage
	}
	if q.Subject == "" {
		q.Subject = schema.SubjectUsage
	}
	var only map[string]bool // nil: every tenant's
	ts := q.Tenants
	if q.Tenant != "" {
		ts = append([]string{q.Tenant}, ts...)
	}
	for _, t := range ts {
		if !schema.ValidTenant(t) {
			return UsageReport{}, fmt.Errorf("%w: tenant %q is not one subject token", ErrConfig, t)
		}
		if only == nil {
			only = map[string]bool{}
		}
		only[t] = true
	}
	s, err := js.Stream(ctx, q.Stream)
	if err != nil {
		return UsageReport{}, fmt.Errorf("usage stream %s: %w", q.Stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return UsageReport{}, fmt.Errorf("usage stream %s: %w", q.Stream, err)
	}
	last := info.State.LastSeq
	cfg := natsjs.OrderedConsumerConfig{}
	for _, t := range slices.Sorted(maps.Keys(only)) {
		cfg.FilterSubjects = append(cfg.FilterSubjects, schema.UsageSubject(usagePrefix(q.Subject), t))
	}
	if !q.Since.IsZero() {
		since := q.Since
		cfg.DeliverPolicy, cfg.OptStartTime = natsjs.DeliverByStartTimePolicy, &since
	}
	c, err := s.OrderedConsumer(ctx, cfg)
	if err != nil {
		return UsageReport{}, fmt.Errorf("usage stream %s: %w", q.Stream, err)
	}
	type key struct {
		hour   time.Time
		tenant string
	}
	sums := map[key]*UsageRow{}
	var rep UsageReport
	var remaining uint64
	if ci := c.CachedInfo(); ci != nil {
		remaining = ci.NumPending
	}
	for remaining > 0 && last > 0 {
		// Bounded in bytes too: a batch the subscription's pending
		// limit cannot hold would lose messages without an error.
		batch, err := c.Fetch(int(min(remaining, 512)), natsjs.FetchMaxWait(5*time.Second), natsjs.FetchMaxBytes(usageFetchBytes))
		if err != nil {
			return UsageReport{}, fmt.Errorf("usage stream %s: %w", q.Stream, err)
		}
		n := 0
		done := false
		for m := range batch.Messages() {
			n++
			remaining--
			md, err := m.Metadata()
			if err != nil {
				rep.Skipped++
				continue
			}
			if md.Sequence.Stream > last || (!q.Until.IsZero() && md.Timestamp.After(q.Until)) {
				done = true
				continue
			}
			e, err := schema.DecodeUsageEvent(m.Data())
			if err != nil || schema.UsageSubject(usagePrefix(q.Subject), e.Tenant) != m.Subject() {
				rep.Skipped++
				continue
			}
			if only != nil && !only[e.Tenant] {
				continue
			}
			k := key{tenant: e.Tenant}
			if !q.Total {
				k.hour = md.Timestamp.UTC().Truncate(time.Hour)
			}
			r := sums[k]
			if r == nil {
				r = &UsageRow{Hour: k.hour, Tenant: e.Tenant}
				sums[k] = r
			}
			r.add(e)
			rep.Events++
		}
		// A pull that reached its byte bound ends early; nats.go says so
		// by ending the batch, not by an error.
		if err := batch.Error(); err != nil && !errors.Is(err, natsjs.ErrNoMessages) && !errors.Is(err, natsjs.ErrMaxBytesExceeded) {
			return UsageReport{}, fmt.Errorf("usage stream %s: %w", q.Stream, err)
		}
		if done {
			break
		}
		if n == 0 {
			// Events may have aged out meanwhile: the consumer says.
			if ci, err := c.Info(ctx); err == nil && ci.NumPending == 0 {
				break
			}
			// The server sends nothing for a pull whose first message is
			// over its byte bound (at once), or did not answer in time.
			return UsageReport{}, fmt.Errorf("usage stream %s: %d messages still pending and none read: the next is over %d bytes (a usage event is at most %d; only the fleet's credentials write the stream), or the server did not answer within 5s",
				q.Stream, remaining, usageFetchBytes, schema.MaxUsageEventBytes)
		}
	}
	rep.Rows = make([]UsageRow, 0, len(sums))
	for _, k := range slices.SortedFunc(maps.Keys(sums), func(a, b key) int {
		if c := a.hour.Compare(b.hour); c != 0 {
			return c
		}
		return strings.Compare(a.tenant, b.tenant)
	}) {
		rep.Rows = append(rep.Rows, *sums[k])
	}
	return rep, nil
}

// Merge adds o's sums to r (the rows of one tenant under two keys).
func (r *UsageRow) Merge(o UsageRow) {
	r.Jobs += o.Jobs
	for code, n := range o.Failed {
		r.addFailed(code, n)
	}
	r.Requests += o.Requests
	r.Texts += o.Texts
	r.Tokens += o.Tokens
	r.PaddedTokens += o.PaddedTokens
	r.ComputeSeconds += o.ComputeSeconds
	r.CachedTexts += o.CachedTexts
	r.CachedTokens += o.CachedTokens
}

// maxUsageCodes bounds the codes a row counts apart.
const maxUsageCodes = 64

// addFailed counts n jobs failed with code; past maxUsageCodes codes a
// new one counts as "other" (the codes are a closed set; a forged event's
// are not).
func (r *UsageRow) addFailed(code schema.Code, n int64) {
	if r.Failed == nil {
		r.Failed = map[schema.Code]int64{}
	}
	if _, ok := r.Failed[code]; !ok && len(r.Failed) >= maxUsageCodes {
		code = "other"
	}
	r.Failed[code] += n
}

// add sums one event into r.
func (r *UsageRow) add(e schema.UsageEvent) {
	one := UsageRow{Jobs: 1, Texts: e.Texts, Tokens: e.Tokens, PaddedTokens: e.PaddedTokens,
		ComputeSeconds: e.ComputeSeconds, CachedTexts: e.CachedTexts, CachedTokens: e.CachedTokens}
	if e.Request {
		one.Requests = 1
	}
	r.Merge(one)
	if e.Code != "" {
		r.addFailed(e.Code, 1)
	}
}
