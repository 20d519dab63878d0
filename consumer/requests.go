package consumer

import (
	"context"
	"math"
	"time"

	"github.com/jetembed/jetembed/schema"
)

// Request-reply deliveries that find the interactive budget full wait in
// a queue of their own instead of being refused: a burst of requests (a
// gateway splitting one HTTP call into parts) is work to do, not
// overload. Submit never blocks for them (it runs in the service's
// workers, where a wait would stall every request behind it): a waiting
// request is taken in by release when room frees. The queue is fair by
// tenant: each tenant's requests wait in arrival order, tenants are taken
// in turn (round-robin), and when the queue is full a tenant under its
// share (the queue divided among the tenants waiting) takes room from the
// one holding the most, whose newest requests are answered overloaded: one
// tenant's flood never keeps another's requests out. A request is refused
// overloaded when its tenant is at its share of a full queue, or the
// measured drain rate says it could not start before its deadline; one
// whose wait outlasts its deadline (or [Config.RequestWait]) is answered
// then.

// waitQueue holds the waiting requests: one FIFO per tenant, and the
// tenants in turn order.
type waitQueue struct {
	by     map[string]*tenantWait
	ring   []string // tenants with requests waiting, in turn order
	next   int      // index in ring of the tenant whose turn it is
	tokens int      // the cost of every waiting request
}

type tenantWait struct {
	jobs   []*job
	tokens int
}

func (q *waitQueue) len() int { return len(q.ring) }

// push adds j behind its tenant's requests. A tenant with none waiting
// joins the turn just before the tenant whose turn it is.
func (q *waitQueue) push(j *job) {
	if q.by == nil {
		q.by = map[string]*tenantWait{}
	}
	tw := q.by[j.tenant]
	if tw == nil {
		tw = &tenantWait{}
		q.by[j.tenant] = tw
		q.next = min(q.next, len(q.ring))
		q.ring = append(q.ring, "")
		copy(q.ring[q.next+1:], q.ring[q.next:])
		q.ring[q.next] = j.tenant
	}
	tw.jobs = append(tw.jobs, j)
	tw.tokens += j.cost
	q.tokens += j.cost
}

// peek is the oldest request of the tenant whose turn it is; nil when none
// waits.
func (q *waitQueue) peek() *job {
	if len(q.ring) == 0 {
		return nil
	}
	if q.next >= len(q.ring) {
		q.next = 0
	}
	return q.by[q.ring[q.next]].jobs[0]
}

// pop removes the request peek returned and passes the turn on.
func (q *waitQueue) pop() {
	tenant := q.ring[q.next]
	tw := q.by[tenant]
	j := tw.jobs[0]
	tw.jobs[0] = nil
	tw.jobs = tw.jobs[1:]
	q.account(tenant, tw, j)
	if len(tw.jobs) > 0 {
		q.next++
	}
}

// account takes j's cost off and forgets a tenant with nothing left
// waiting (its place in the turn goes to the next tenant).
func (q *waitQueue) account(tenant string, tw *tenantWait, j *job) {
	tw.tokens -= j.cost
	q.tokens -= j.cost
	if len(tw.jobs) > 0 {
		return
	}
	delete(q.by, tenant)
	for i, t := range q.ring {
		if t == tenant {
			q.ring = append(q.ring[:i], q.ring[i+1:]...)
			if i < q.next {
				q.next--
			}
			break
		}
	}
}

// remove takes j out; false when it was not waiting.
func (q *waitQueue) remove(j *job) bool {
	tw := q.by[j.tenant]
	if tw == nil {
		return false
	}
	for i, w := range tw.jobs {
		if w == j {
			tw.jobs = append(tw.jobs[:i], tw.jobs[i+1:]...)
			q.account(j.tenant, tw, j)
			return true
		}
	}
	return false
}

// ahead is the cost that would be taken in before j, were it queued now,
// j's own included: every tenant's waiting requests up to as many tokens
// as j's tenant will have waiting (the turns interleave them).
func (q *waitQueue) ahead(j *job) int {
	own := j.cost
	if tw := q.by[j.tenant]; tw != nil {
		own += tw.tokens
	}
	n := own
	for t, tw := range q.by {
		if t != j.tenant {
			n += min(tw.tokens, own)
		}
	}
	return n
}

// hog is the waiting requests of the tenant other than tenant that holds
// the most tokens.
func (q *waitQueue) hog(tenant string) *tenantWait {
	var most *tenantWait
	for t, tw := range q.by {
		if t != tenant && (most == nil || tw.tokens > most.tokens) {
			most = tw
		}
	}
	return most
}

// all empties the queue and returns what waited.
func (q *waitQueue) all() []*job {
	var out []*job
	for _, t := range q.ring {
		out = append(out, q.by[t].jobs...)
	}
	*q = waitQueue{}
	return out
}

// queueRequest puts request j in the waiting queue, or refuses it; it may
// push out requests of the tenant holding the most (evicted, to be
// answered overloaded by the caller once c.mu is released). c.mu is held;
// it returns the refusal (nil when queued).
func (c *Loop) queueRequest(j *job, now time.Time) (evicted []*job, refusal *schema.Error) {
	budget := c.cfg.InteractiveTokens
	q := &c.waitReq
	if q.tokens+j.cost > c.cfg.RequestQueueTokens {
		// Full: a tenant under its share takes room from the one that
		// holds the most, if that one is over its own share.
		tenants := len(q.by)
		if q.by[j.tenant] == nil {
			tenants++
		}
		share := c.cfg.RequestQueueTokens / max(tenants, 1)
		own := 0
		if tw := q.by[j.tenant]; tw != nil {
			own = tw.tokens
		}
		if own+j.cost > share {
			return nil, schema.Errorf(schema.CodeOverloaded, "interactive budget full (%d of %d tokens held) and %d tokens of requests already waiting, %d of them this tenant's (its share: %d)%s",
				c.heldTokens[1], budget, q.tokens, own, share, c.retryHint(c.heldTokens[1]+q.tokens+j.cost-budget))
		}
		for q.tokens+j.cost > c.cfg.RequestQueueTokens {
			hog := q.hog(j.tenant)
			if hog == nil || hog.tokens <= share {
				break
			}
			last := hog.jobs[len(hog.jobs)-1]
			q.remove(last)
			evicted = append(evicted, last)
		}
		if q.tokens+j.cost > c.cfg.RequestQueueTokens && q.tokens > 0 {
			return evicted, schema.Errorf(schema.CodeOverloaded, "interactive budget full (%d of %d tokens held) and %d tokens of requests already waiting%s",
				c.heldTokens[1], budget, q.tokens, c.retryHint(c.heldTokens[1]+q.tokens+j.cost-budget))
		}
	}
	// A request with a deadline waits until then (its caller said how long
	// it waits), at most MaxRequestWait; one without waits RequestWait.
	limit := now.Add(c.cfg.RequestWait)
	if !j.deadline.IsZero() {
		limit = minTime(j.deadline, now.Add(MaxRequestWait))
	}
	if wait, ok := c.meter.wait(c.heldTokens[1] + q.ahead(j) - budget); ok && now.Add(wait).After(limit) {
		return evicted, schema.Errorf(schema.CodeOverloaded, "interactive budget full: at the measured %.0f tokens/s this request would start in about %s, after its deadline%s",
			c.meter.rate, wait.Round(time.Millisecond), c.retryHint(c.heldTokens[1]+q.ahead(j)-budget))
	}
	q.push(j)
	j.expiry = time.AfterFunc(max(limit.Sub(now), 0), func() { c.expireRequest(j) })
	return evicted, nil
}

// evict answers requests pushed out of the waiting queue by another
// tenant's (c.mu not held).
func (c *Loop) evict(ctx context.Context, evicted []*job) {
	for _, j := range evicted {
		j.expiry.Stop()
		c.settle(ctx, j, c.decide(j, nil, schema.Errorf(schema.CodeOverloaded,
			"pushed out of the interactive queue by another tenant's request: this tenant holds more than its share%s", c.retryHintLocked())))
	}
}

// retryHintLocked is retryHint with c.mu taken.
func (c *Loop) retryHintLocked() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.retryHint(c.heldTokens[1] + c.waitReq.tokens - c.cfg.InteractiveTokens)
}

// retryHint tells a refused caller when the backlog of excess tokens will
// have drained at the measured rate.
func (c *Loop) retryHint(excess int) string {
	wait, ok := c.meter.wait(excess)
	if !ok {
		return ""
	}
	return ": retry in about " + time.Duration(math.Ceil(max(wait.Seconds(), 1))*float64(time.Second)).String()
}

// admitWaiting takes waiting requests into the queue, tenants in turn,
// while the one whose turn it is fits. c.mu is held.
func (c *Loop) admitWaiting(now time.Time) bool {
	took := false
	for {
		j := c.waitReq.peek()
		if j == nil || c.heldTokens[1]+j.cost > c.cfg.InteractiveTokens {
			break
		}
		j.expiry.Stop()
		c.waitReq.pop()
		c.hold(j, now)
		took = true
	}
	return took
}

// expireRequest answers a request that waited until its deadline (or
// RequestWait) without room.
func (c *Loop) expireRequest(j *job) {
	c.mu.Lock()
	if !c.dropWaiting(j) {
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	se := schema.Errorf(schema.CodeOverloaded, "waited %s for interactive room without getting any", c.cfg.Now().Sub(j.queued).Round(time.Millisecond))
	if !j.deadline.IsZero() && !c.cfg.Now().Before(j.deadline) {
		se = schema.Errorf(schema.CodeDeadlineExceeded, "deadline passed while the request waited for interactive room")
	}
	c.settle(context.Background(), j, c.decide(j, nil, se))
}

// dropWaiting removes j from the waiting queue; false when it was not
// there (taken in, or already answered). c.mu is held.
func (c *Loop) dropWaiting(j *job) bool { return c.waitReq.remove(j) }

// failWaiting answers every waiting request with the shutdown refusal.
func (c *Loop) failWaiting(ctx context.Context) {
	c.mu.Lock()
	w := c.waitReq.all()
	c.mu.Unlock()
	for _, j := range w {
		j.expiry.Stop()
		c.settle(ctx, j, c.decide(j, nil, errShutdown))
	}
}

// drainMeter measures how fast held interactive tokens are released,
// counting only the time the class held any: an idle spell does not make
// the rate look slow.
type drainMeter struct {
	last    time.Time
	busy    time.Duration
	drained int
	rate    float64 // tokens a second, 0 until measured
}

// meterWindow is the busy time of one rate sample.
const meterWindow = 500 * time.Millisecond

// tick accounts the time since the last tick, busy when tokens were held,
// and drained tokens released now.
func (m *drainMeter) tick(now time.Time, wasBusy bool, drained int) {
	if wasBusy && !m.last.IsZero() && now.After(m.last) {
		m.busy += now.Sub(m.last)
	}
	m.last = now
	m.drained += drained
	if m.busy >= meterWindow {
		sample := float64(m.drained) / m.busy.Seconds()
		if m.rate == 0 {
			m.rate = sample
		} else {
			m.rate = 0.7*m.rate + 0.3*sample
		}
		m.busy, m.drained = 0, 0
	}
}

// wait is how long excess tokens take to drain at the measured rate; ok is
// false before anything was measured.
func (m *drainMeter) wait(excess int) (time.Duration, bool) {
	rate := m.rate
	if rate == 0 && m.busy >= meterWindow/5 && m.drained > 0 {
		rate = float64(m.drained) / m.busy.Seconds()
	}
	if rate <= 0 {
		return 0, false
	}
	return time.Duration(float64(max(excess, 0)) / rate * float64(time.Second)), true
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
