package jobloop

import (
	"context"
	"math"
	"time"

	"github.com/jetembed/jetembed/schema"
)

// Request-reply deliveries that find the interactive budget full wait in
// a queue of their own, in arrival order, instead of being refused: a
// burst of requests (a gateway splitting one HTTP call into parts) is
// work to do, not overload. Submit never blocks for them (it runs in the
// micro service's one subscription goroutine, where a wait would stall
// every request behind it): a waiting request is taken in by release when
// room frees. It is refused overloaded only when the queue is full or the
// measured drain rate says it could not start before its deadline; one
// whose wait outlasts its deadline (or [Config.RequestWait]) is answered
// then.

// queueRequest puts request j in the waiting queue, or refuses it. c.mu is
// held; it returns the refusal (nil when queued).
func (c *Loop) queueRequest(j *job, now time.Time) *schema.Error {
	budget := c.cfg.InteractiveTokens
	if c.waitTokens+j.cost > c.cfg.RequestQueueTokens {
		return schema.Errorf(schema.CodeOverloaded, "interactive budget full (%d of %d tokens held) and %d tokens of requests already waiting%s",
			c.heldTokens[1], budget, c.waitTokens, c.retryHint(c.heldTokens[1]+c.waitTokens+j.cost-budget))
	}
	limit := now.Add(c.cfg.RequestWait)
	if !j.deadline.IsZero() && j.deadline.Before(limit) {
		limit = j.deadline
	}
	if wait, ok := c.meter.wait(c.heldTokens[1] + c.waitTokens + j.cost - budget); ok && now.Add(wait).After(limit) {
		return schema.Errorf(schema.CodeOverloaded, "interactive budget full: at the measured %.0f tokens/s this request would start in about %s, after its deadline%s",
			c.meter.rate, wait.Round(time.Millisecond), c.retryHint(c.heldTokens[1]+c.waitTokens+j.cost-budget))
	}
	c.waitReq = append(c.waitReq, j)
	c.waitTokens += j.cost
	j.expiry = time.AfterFunc(max(limit.Sub(now), 0), func() { c.expireRequest(j) })
	return nil
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

// admitWaiting takes waiting requests into the queue, first come first
// served, while they fit. c.mu is held.
func (c *Loop) admitWaiting(now time.Time) bool {
	took := false
	for len(c.waitReq) > 0 {
		j := c.waitReq[0]
		if c.heldTokens[1]+j.cost > c.cfg.InteractiveTokens {
			break
		}
		j.expiry.Stop()
		c.waitReq[0] = nil
		c.waitReq = c.waitReq[1:]
		c.waitTokens -= j.cost
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
func (c *Loop) dropWaiting(j *job) bool {
	for i, w := range c.waitReq {
		if w == j {
			c.waitReq = append(c.waitReq[:i], c.waitReq[i+1:]...)
			c.waitTokens -= j.cost
			return true
		}
	}
	return false
}

// failWaiting answers every waiting request with the shutdown refusal.
func (c *Loop) failWaiting(ctx context.Context) {
	c.mu.Lock()
	w := c.waitReq
	c.waitReq, c.waitTokens = nil, 0
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
