package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/jetembed/jetembed/internal/drain"
)

// window is the gateway's admission: the estimated tokens of fleet jobs
// in flight, bounded by what the fleet holds at once (the sum of its
// members' interactive capacity), so that a burst of parts waits here, in
// arrival order, instead of overflowing a member's budget. A call is
// admitted or refused as one unit at its start: refused only when, at the
// measured drain rate, the tokens ahead of it could not drain before its
// deadline; once admitted, its parts wait their turn.
type window struct {
	mu      sync.Mutex
	cap     int
	used    int // tokens of parts in flight
	queued  int // tokens of admitted calls' parts not yet in flight
	waiters []*partWaiter
	meter   drain.Meter
}

type partWaiter struct {
	n     int
	ready chan struct{}
}

// setCap changes the capacity (the fleet grew or shrank); waiters that
// now fit go.
func (w *window) setCap(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cap = max(n, 1)
	w.grantLocked()
}

func (w *window) capacity() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cap
}

// admit decides on a call of tokens that must end by deadline. It returns
// how long to wait before retrying when it refuses (ok false).
func (w *window) admit(tokens int, now, deadline time.Time) (retry time.Duration, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ahead := w.used + w.queued
	excess := ahead + tokens - w.cap
	if excess > 0 {
		if wait, measured := w.meter.Wait(excess, now); measured && now.Add(wait).After(deadline) {
			// Come back when the backlog ahead would let this call
			// start in time.
			over := wait - deadline.Sub(now)
			return max(over, time.Second), false
		}
	}
	w.queued += tokens
	return 0, true
}

// forfeit gives back the tokens of an admitted call's parts that will not
// be sent (the call failed or ended).
func (w *window) forfeit(tokens int) {
	w.mu.Lock()
	w.queued = max(w.queued-tokens, 0)
	w.mu.Unlock()
}

// acquire takes n tokens for one part of an admitted call (clamped to the
// capacity, so that one huge text goes alone rather than never), first
// come first served, until ctx ends. It returns the tokens taken.
func (w *window) acquire(ctx context.Context, n int) (int, error) {
	w.mu.Lock()
	w.queued = max(w.queued-n, 0)
	n = min(max(n, 1), w.cap)
	if len(w.waiters) == 0 && w.used+n <= w.cap {
		w.take(n, time.Now())
		w.mu.Unlock()
		return n, nil
	}
	pw := &partWaiter{n: n, ready: make(chan struct{})}
	w.waiters = append(w.waiters, pw)
	w.mu.Unlock()
	select {
	case <-pw.ready:
		return n, nil
	case <-ctx.Done():
		w.mu.Lock()
		defer w.mu.Unlock()
		select {
		case <-pw.ready:
			w.releaseLocked(n, false)
		default:
			for i, x := range w.waiters {
				if x == pw {
					w.waiters = append(w.waiters[:i], w.waiters[i+1:]...)
					break
				}
			}
			w.grantLocked()
		}
		return 0, context.Cause(ctx)
	}
}

// release gives back n tokens of a part; done says the fleet answered it
// (it counts in the drain rate).
func (w *window) release(n int, done bool) {
	w.mu.Lock()
	w.releaseLocked(n, done)
	w.mu.Unlock()
}

func (w *window) take(n int, now time.Time) {
	w.meter.Tick(now, w.used > 0, 0)
	w.used += n
}

func (w *window) releaseLocked(n int, done bool) {
	drained := 0
	if done {
		drained = n
	}
	w.meter.Tick(time.Now(), w.used > 0, drained)
	w.used -= n
	w.grantLocked()
}

func (w *window) grantLocked() {
	now := time.Now()
	for len(w.waiters) > 0 {
		pw := w.waiters[0]
		if w.used+pw.n > w.cap && w.used > 0 {
			return
		}
		w.take(pw.n, now)
		close(pw.ready)
		w.waiters = w.waiters[1:]
	}
}

// retryAfter is how long until the tokens in flight and waiting have
// drained at the measured rate; fallback when nothing was measured.
func (w *window) retryAfter(fallback time.Duration) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wait, ok := w.meter.Wait(w.used+w.queued, time.Now()); ok {
		return max(wait, time.Second)
	}
	return fallback
}
