package jetstream

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/schema"
)

// Quota bounds one tenant's use of the fleet member: tokens per minute and
// tokens in flight (started, not yet settled). Zero means no bound.
// Tokens are estimated when a job or request is let in, at
// [BytesPerToken] bytes of its body a token (a rate limit decides before
// the text is tokenized, as cloud APIs' limiters estimate from
// characters); usage metering counts the real tokens.
type Quota struct {
	TokensPerMinute int
	InFlight        int
}

// BytesPerToken is the estimate of a quota's charge: a job's body bytes
// over four, at least one token.
const BytesPerToken = 4

func estimateTokens(body int) int { return max(body/BytesPerToken, 1) }

// AnyTenant keys the quota (or weight) of every tenant not named.
const AnyTenant = engine.AnyTenant

// Shares are the per-tenant weights and quotas of a member: how its
// per-tenant pulling splits the job loop between tenants that are all
// backlogged (weights, default 1), and how much each may use (quotas,
// default none). A weight or quota keyed [AnyTenant] applies to every
// tenant without its own.
type Shares struct {
	Weights map[string]int
	Quotas  map[string]Quota
}

// Weight is tenant's weight: its own, else AnyTenant's, else 1.
func (s Shares) Weight(tenant string) int {
	if w, ok := s.Weights[tenant]; ok && w > 0 {
		return w
	}
	if w, ok := s.Weights[AnyTenant]; ok && w > 0 {
		return w
	}
	return 1
}

// Quota is tenant's quota: its own, else AnyTenant's, else none.
func (s Shares) Quota(tenant string) Quota {
	if q, ok := s.Quotas[tenant]; ok {
		return q
	}
	return s.Quotas[AnyTenant]
}

// Names reports whether s names tenant: a weight or a quota of its own,
// not [AnyTenant]'s.
func (s Shares) Names(tenant string) bool {
	if tenant == AnyTenant {
		return false
	}
	_, w := s.Weights[tenant]
	_, q := s.Quotas[tenant]
	return w || q
}

// MaxWeight bounds a tenant's weight.
const MaxWeight = 1000

// Validate reports weights out of 1..[MaxWeight], negative quotas and
// names that cannot be tenants.
func (s Shares) Validate() error {
	for name, w := range s.Weights {
		if name != AnyTenant && !schema.ValidTenant(name) {
			return fmt.Errorf("tenant weight: %q is not a tenant name", name)
		}
		if w < 1 || w > MaxWeight {
			return fmt.Errorf("tenant weight %s=%d: want 1 to %d", name, w, MaxWeight)
		}
	}
	for name, q := range s.Quotas {
		if name != AnyTenant && !schema.ValidTenant(name) {
			return fmt.Errorf("tenant quota: %q is not a tenant name", name)
		}
		if q.TokensPerMinute < 0 || q.InFlight < 0 {
			return fmt.Errorf("tenant quota %s: negative", name)
		}
	}
	return nil
}

// ParseWeights parses "a=3,b=1" (spaces allowed, empty for none).
func ParseWeights(s string) (map[string]int, error) {
	out := map[string]int{}
	for _, part := range splitList(s) {
		name, v, ok := strings.Cut(part, "=")
		w, err := strconv.Atoi(strings.TrimSpace(v))
		name = strings.TrimSpace(name)
		if !ok || err != nil || name == "" {
			return nil, fmt.Errorf("tenant weight %q: want NAME=WEIGHT", part)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("tenant weight %s given twice", name)
		}
		out[name] = w
	}
	return out, Shares{Weights: out}.Validate()
}

// ParseQuotas parses "a=60000/8000,b=120000" (NAME=TOKENS_PER_MINUTE[/IN_FLIGHT];
// 0 is no bound).
func ParseQuotas(s string) (map[string]Quota, error) {
	out := map[string]Quota{}
	for _, part := range splitList(s) {
		name, v, ok := strings.Cut(part, "=")
		name = strings.TrimSpace(name)
		tpm, inflight, hasInflight := strings.Cut(strings.TrimSpace(v), "/")
		var q Quota
		var err1, err2 error
		q.TokensPerMinute, err1 = strconv.Atoi(strings.TrimSpace(tpm))
		if hasInflight {
			q.InFlight, err2 = strconv.Atoi(strings.TrimSpace(inflight))
		}
		if !ok || name == "" || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("tenant quota %q: want NAME=TOKENS_PER_MINUTE[/IN_FLIGHT_TOKENS]", part)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("tenant quota %s given twice", name)
		}
		out[name] = q
	}
	return out, Shares{Quotas: out}.Validate()
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// String is the flag form of the shares' weights and quotas, sorted.
func (s Shares) String() string {
	var parts []string
	for n, w := range s.Weights {
		parts = append(parts, n+"="+strconv.Itoa(w))
	}
	for n, q := range s.Quotas {
		parts = append(parts, fmt.Sprintf("%s=%d/%d", n, q.TokensPerMinute, q.InFlight))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// quotas keeps every tenant's use against its quota: a token bucket of
// TokensPerMinute (a minute's worth at most, refilled continuously; a
// charge may take it below zero, and the tenant then waits until it is
// positive again) and the tokens in flight. Safe for concurrent use.
type quotas struct {
	shares Shares
	now    func() time.Time

	mu    sync.Mutex
	state map[string]*quotaState
	// swept is when a sweep of the full state last found no tenant at
	// rest: the next one waits a second, so that minted tenants do not
	// each cost a scan of the whole state.
	swept time.Time
}

type quotaState struct {
	bucket   float64 // tokens available
	at       time.Time
	inFlight int
}

// maxQuotaTenants bounds the tenants whose state is kept: a tenant at
// rest with a full bucket and nothing in flight is forgotten first, and
// when none is, a tenant the shares do not name shares the state of
// overflowTenant with every other such tenant beyond the bound (tenants
// minted faster than they come to rest are held back together; forgetting
// one that is not at rest would give it a full bucket again).
const maxQuotaTenants = 4096

// overflowTenant keys the shared state; it contains a dot, so it is no
// tenant's name.
const overflowTenant = ".overflow"

func newQuotas(s Shares, now func() time.Time) *quotas {
	if now == nil {
		now = time.Now
	}
	return &quotas{shares: s, now: now, state: map[string]*quotaState{}}
}

// limited reports whether tenant has any quota at all.
func (q *quotas) limited(tenant string) bool {
	if q == nil {
		return false
	}
	qu := q.shares.Quota(tenant)
	return qu.TokensPerMinute > 0 || qu.InFlight > 0
}

// key is the state tenant's use is kept in: its own, or overflowTenant's
// when the state is full of tenants not at rest. q.mu is held.
func (q *quotas) key(tenant string, now time.Time) string {
	if _, ok := q.state[tenant]; ok || len(q.state) < maxQuotaTenants || q.shares.Names(tenant) {
		return tenant
	}
	if q.swept.IsZero() || now.Sub(q.swept) >= time.Second || now.Before(q.swept) {
		q.forgetIdle(now)
		if len(q.state) < maxQuotaTenants {
			q.swept = time.Time{}
			return tenant
		}
		q.swept = now
	}
	return overflowTenant
}

func (q *quotas) get(tenant string, qu Quota, now time.Time) *quotaState {
	st := q.state[tenant]
	if st == nil {
		st = &quotaState{bucket: float64(qu.TokensPerMinute), at: now}
		q.state[tenant] = st
		return st
	}
	if qu.TokensPerMinute > 0 {
		rate := float64(qu.TokensPerMinute) / 60
		st.bucket = math.Min(st.bucket+rate*now.Sub(st.at).Seconds(), float64(qu.TokensPerMinute))
	}
	st.at = now
	return st
}

func (q *quotas) forgetIdle(now time.Time) {
	for t, st := range q.state {
		qu := q.shares.Quota(t)
		full := qu.TokensPerMinute == 0 || st.bucket+float64(qu.TokensPerMinute)/60*now.Sub(st.at).Seconds() >= float64(qu.TokensPerMinute)
		if st.inFlight == 0 && full {
			delete(q.state, t)
		}
	}
}

// wait is how long tenant must wait before it may start more work: 0 when
// it may now.
func (q *quotas) wait(tenant string) time.Duration {
	if !q.limited(tenant) {
		return 0
	}
	qu := q.shares.Quota(tenant)
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	return q.waitLocked(q.key(tenant, now), qu, now)
}

// waitInFlight is the wait while a tenant is at its in-flight bound: work
// ends in about this time, and the member looks again.
const waitInFlight = time.Second

func (q *quotas) waitLocked(tenant string, qu Quota, now time.Time) time.Duration {
	st := q.get(tenant, qu, now)
	var d time.Duration
	if qu.TokensPerMinute > 0 && st.bucket < 1 {
		rate := float64(qu.TokensPerMinute) / 60
		d = time.Duration((1 - st.bucket) / rate * float64(time.Second))
	}
	if qu.InFlight > 0 && st.inFlight >= qu.InFlight {
		d = max(d, waitInFlight)
	}
	return d
}

// take charges tokens to tenant if it may start work now; else it
// charges nothing and says how long to wait. release gives the in-flight
// tokens back (call it once, when the work is settled).
func (q *quotas) take(tenant string, tokens int) (release func(), wait time.Duration) {
	if !q.limited(tenant) {
		return func() {}, 0
	}
	qu := q.shares.Quota(tenant)
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	tenant = q.key(tenant, now)
	if d := q.waitLocked(tenant, qu, now); d > 0 {
		return nil, d
	}
	st := q.state[tenant]
	st.bucket -= float64(tokens)
	st.inFlight += tokens
	var once sync.Once
	return func() {
		once.Do(func() {
			q.mu.Lock()
			defer q.mu.Unlock()
			if st := q.state[tenant]; st != nil {
				st.inFlight = max(st.inFlight-tokens, 0)
			}
		})
	}, 0
}

// quotaSink refuses a request (a delivery with Respond) whose tenant is
// over its quota with quota_exceeded and its retry-after, and charges the
// others until they are answered. Queued jobs pass: their quota is kept by
// the per-tenant pulling, which leaves them in the stream.
type quotaSink struct {
	Sink
	q *quotas
}

func (s quotaSink) Submit(ctx context.Context, d consumer.Delivery) error {
	r, ok := d.(*consumer.Request)
	if !ok || !s.q.limited(r.Tenant) || r.Refusal != nil {
		return s.Sink.Submit(ctx, d)
	}
	release, wait := s.q.take(r.Tenant, estimateTokens(requestBytes(r)))
	if wait > 0 {
		r.Refusal = schema.QuotaExceeded(wait)
		return s.Sink.Submit(ctx, r)
	}
	// The charge is given back when the loop settled the request, answered
	// or not (a refused reply gets no answer).
	settled := r.Settled
	r.Settled = func() {
		release()
		if settled != nil {
			settled()
		}
	}
	err := s.Sink.Submit(ctx, r)
	if err != nil {
		release()
	}
	return err
}

// requestBytes is the body a request's charge is estimated from: its
// Data, or, for a request made inside the process whose job is decoded
// already (Data unread and empty), the job's texts.
func requestBytes(r *consumer.Request) int {
	if r.Job == nil {
		return len(r.Data)
	}
	n := 0
	for _, t := range r.Job.Texts {
		n += len(t)
	}
	return max(n, len(r.Data))
}

// Stats passes the sink's on.
func (s quotaSink) Stats() consumer.Stats {
	if ss, ok := s.Sink.(statser); ok {
		return ss.Stats()
	}
	return consumer.Stats{}
}
