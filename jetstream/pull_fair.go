package jetstream

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jetembed/jetembed/consumer"
)

// fairGate is the one way from the per-tenant fetch loops into the job
// loop: it hands over one delivery at a time, choosing between the
// tenants that have one waiting by start-time fair queueing over their
// bytes (a tenant's share follows its weight; a tenant that was idle
// starts at the current virtual time, so it neither banks credit nor
// waits behind another's backlog; see maxLag), and never lets a tenant over its quota
// in. A fetch loop submits its buffer's head and waits in Submit, where
// its own heartbeats keep the message alive: buffers are per tenant, so
// one tenant's backlog never stands in front of another's.
//
// The tenant whose delivery just went in is back a moment later with its
// next one. So that it keeps its share against a tenant that waits
// already, the gate holds the turn for it ("on deck") when its loop has
// more buffered and its start tag is the smallest; its loop calls Submit
// again at once (or is stopped: then [fairGate.forget] gives the turn
// away).
type fairGate struct {
	sink   Sink
	shares Shares
	q      *quotas

	mu     sync.Mutex
	busy   bool   // a delivery is in the sink's Submit
	hand   string // its tenant while busy
	last   string // the tenant of the last delivery handed over
	onDeck string // the tenant the turn is held for ("" none)
	v      float64
	finish map[string]float64 // each tenant's last finish tag
	// waiting are each tenant's deliveries waiting for the turn, oldest
	// first: usually one, two while a tenant's loop is replaced (the old
	// one drains its buffer through the gate beside the new one).
	waiting map[string][]*gateWaiter
	more    map[string]*loopMore // tenant's loop has more buffered
	jobs    map[string]uint64    // deliveries handed over, per tenant
	timer   *time.Timer          // wakes the gate when a quota frees
	timerAt time.Time            // when timer fires
}

// maxLag is the credit a tenant keeps when it had nothing waiting (see
// [fairGate.submit]): as many deliveries of its current size as a tenant
// of weight 1 gets in maxLag turns, so a heavier tenant rides out a dry
// buffer of as many more.
const maxLag = 8

type gateWaiter struct {
	tenant  string
	size    int
	start   float64
	granted bool
	release func()
	ready   chan struct{}
}

func newFairGate(sink Sink, shares Shares, q *quotas) *fairGate {
	return &fairGate{sink: sink, shares: shares, q: q,
		finish: map[string]float64{}, waiting: map[string][]*gateWaiter{},
		more: map[string]*loopMore{}, jobs: map[string]uint64{}}
}

// forTenant is the [Sink] of tenant's fetch loop; more reports whether the
// loop has another delivery buffered after the one in Submit.
func (g *fairGate) forTenant(tenant string, more func() bool) gateSink {
	m := &loopMore{has: more}
	g.mu.Lock()
	g.more[tenant] = m
	g.mu.Unlock()
	return gateSink{g: g, tenant: tenant, loop: m}
}

// loopMore is one fetch loop's "has more buffered": a tenant's newer loop
// replaces it.
type loopMore struct{ has func() bool }

// forget drops the tenant of s (its loop stopped): the turn is not held
// for it. A tenant whose newer loop registered since keeps its state.
func (g *fairGate) forget(s gateSink) {
	g.mu.Lock()
	defer g.mu.Unlock()
	tenant := s.tenant
	if g.more[tenant] != s.loop {
		return
	}
	delete(g.more, tenant)
	delete(g.finish, tenant)
	delete(g.jobs, tenant)
	if g.onDeck == tenant {
		g.onDeck = ""
	}
	if g.last == tenant {
		g.last = ""
	}
	g.dispatchLocked()
}

// reinstate gives tenant's registration back to old, the sink of its loop
// that runs, when failed (of a loop that did not start) took it.
func (g *fairGate) reinstate(old, failed gateSink) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.more[failed.tenant] == failed.loop {
		g.more[failed.tenant] = old.loop
	}
}

type gateSink struct {
	g      *fairGate
	tenant string
	loop   *loopMore
}

func (s gateSink) Submit(ctx context.Context, d consumer.Delivery) error {
	st, ok := d.(*consumer.Stored)
	if !ok {
		return s.g.sink.Submit(ctx, d) // a fetch loop hands over stored jobs only
	}
	return s.g.submit(ctx, s.tenant, st)
}

// Stats are the sink's, with this tenant's count of handed-over jobs:
// the tenant's fetch loop sizes its prefetch on its own throughput.
func (s gateSink) Stats() consumer.Stats {
	var st consumer.Stats
	if ss, ok := s.g.sink.(statser); ok {
		st = ss.Stats()
	}
	s.g.mu.Lock()
	st.Jobs = s.g.jobs[s.tenant]
	s.g.mu.Unlock()
	st.Texts = st.Jobs
	return st
}

func (g *fairGate) submit(ctx context.Context, tenant string, d *consumer.Stored) error {
	size := float64(max(len(d.Data), 1))
	w := &gateWaiter{tenant: tenant, size: len(d.Data), ready: make(chan struct{})}
	g.mu.Lock()
	cost := size / float64(g.shares.Weight(tenant))
	// A tenant keeps up to maxLag deliveries of credit: its buffer may run
	// dry for the moment of a pull request without losing its share.
	w.start = max(g.finish[tenant], g.v-maxLag*size)
	g.finish[tenant] = w.start + cost
	g.waiting[tenant] = append(g.waiting[tenant], w)
	if g.onDeck == tenant {
		g.onDeck = ""
	}
	g.dispatchLocked()
	g.mu.Unlock()
	select {
	case <-w.ready:
	case <-ctx.Done():
		g.mu.Lock()
		granted := w.granted
		if !granted {
			g.unwaitLocked(w)
			g.dispatchLocked()
		}
		g.mu.Unlock()
		if !granted {
			// As the consumer does with a Submit abandoned: the job goes
			// back now, for anyone to take.
			_ = d.Msg.Nak()
			return ctx.Err()
		}
	}
	if w.release != nil {
		d.Msg = settleHook{Message: d.Msg, release: w.release}
	}
	err := g.sink.Submit(ctx, d)
	g.mu.Lock()
	g.busy, g.hand = false, ""
	g.last = tenant
	g.jobs[tenant]++
	g.dispatchLocked()
	g.mu.Unlock()
	return err
}

// dispatchLocked hands the turn to the waiting tenant with the smallest
// start tag that its quota lets in, or holds it for the last tenant when
// that one comes first. g.mu is held.
func (g *fairGate) dispatchLocked() {
	if g.busy || g.onDeck != "" && len(g.waiting[g.onDeck]) == 0 && g.more[g.onDeck] != nil {
		return
	}
	g.onDeck = ""
	var best *gateWaiter
	var soonest time.Duration
	for t, ws := range g.waiting {
		w := ws[0]
		if d := g.q.wait(t); d > 0 {
			if soonest == 0 || d < soonest {
				soonest = d
			}
			continue
		}
		if best == nil || w.start < best.start || w.start == best.start && w.tenant < best.tenant {
			best = w
		}
	}
	if l := g.last; l != "" && len(g.waiting[l]) == 0 && g.more[l] != nil && g.q.wait(l) == 0 && g.more[l].has() {
		if start := max(g.finish[l], g.v); best == nil || start < best.start {
			g.onDeck = l
			return
		}
	}
	if best == nil {
		g.wakeInLocked(soonest)
		return
	}
	release, wait := g.q.take(best.tenant, estimateTokens(best.size))
	if wait > 0 {
		// A request of the tenant took its quota since the check: look
		// again (it is now skipped).
		g.dispatchLocked()
		return
	}
	best.release = release
	g.busy, g.hand = true, best.tenant
	// The virtual time never goes back: a start tag below it (a tenant's
	// credit, maxLag deliveries of its size) would otherwise leave that
	// credit banked in its finish tag for the smaller deliveries after.
	g.v = max(g.v, best.start)
	g.unwaitLocked(best)
	best.granted = true
	close(best.ready)
}

// wakeInLocked has the gate look again in d (0: no wait), unless its
// timer is set for sooner: one timer, moved up when a quota frees before
// the one it waits for. g.mu is held.
func (g *fairGate) wakeInLocked(d time.Duration) {
	if d <= 0 {
		return
	}
	at := time.Now().Add(d)
	if g.timer != nil {
		if !at.Before(g.timerAt) {
			return
		}
		g.timer.Stop()
	}
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.timer != t {
			return // moved up: the newer timer looks
		}
		g.timer = nil
		g.dispatchLocked()
	})
	g.timer, g.timerAt = t, at
}

// unwaitLocked takes w out of its tenant's waiting deliveries. g.mu is
// held.
func (g *fairGate) unwaitLocked(w *gateWaiter) {
	ws := slices.DeleteFunc(g.waiting[w.tenant], func(x *gateWaiter) bool { return x == w })
	if len(ws) == 0 {
		delete(g.waiting, w.tenant)
		return
	}
	g.waiting[w.tenant] = ws
}

// settleHook gives a delivery's quota charge back when it is settled.
type settleHook struct {
	consumer.Message
	release func()
}

func (m settleHook) Ack() error { defer m.release(); return m.Message.Ack() }
func (m settleHook) Nak() error { defer m.release(); return m.Message.Nak() }
func (m settleHook) Term() error {
	defer m.release()
	return m.Message.Term()
}
func (m settleHook) NakWithDelay(d time.Duration) error {
	defer m.release()
	return m.Message.NakWithDelay(d)
}
