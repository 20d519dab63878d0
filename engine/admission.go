package engine

import (
	"context"
	"sync"
)

// admission is a weighted semaphore over in-flight tokens. Waiters are
// served in arrival order so a large call is not starved by small ones.
type admission struct {
	mu      sync.Mutex
	cap     int
	used    int
	waiters []waiter
}

type waiter struct {
	n     int
	ready chan struct{}
}

type waitKey struct{}

// WithAdmissionWait returns a context under which [Engine.Embed] waits for
// in-flight capacity instead of failing fast with overloaded.
//
// Failing fast is the default because a consumer that hears overloaded
// NAKs its jobs with a delay, letting a less busy member of the fleet take
// them, and a request-reply caller learns at once; a local batch tool (the
// embed command) wants back-pressure instead and opts into waiting.
func WithAdmissionWait(ctx context.Context) context.Context {
	return context.WithValue(ctx, waitKey{}, true)
}

func waits(ctx context.Context) bool {
	w, _ := ctx.Value(waitKey{}).(bool)
	return w
}

// acquire takes n tokens (clamped to the capacity, so one huge call runs
// alone rather than never). It reports false when it would have to wait
// and wait is false, or when ctx ends first.
func (a *admission) acquire(ctx context.Context, n int, wait bool) (int, error) {
	n = min(n, a.cap)
	a.mu.Lock()
	if len(a.waiters) == 0 && a.used+n <= a.cap {
		a.used += n
		a.mu.Unlock()
		return n, nil
	}
	if !wait {
		a.mu.Unlock()
		return 0, errOverloaded
	}
	w := waiter{n: n, ready: make(chan struct{})}
	a.waiters = append(a.waiters, w)
	a.mu.Unlock()
	select {
	case <-w.ready:
		return n, nil
	case <-ctx.Done():
		a.mu.Lock()
		defer a.mu.Unlock()
		select {
		case <-w.ready:
			// Granted while we gave up: hand it back.
			a.releaseLocked(n)
		default:
			for i := range a.waiters {
				if a.waiters[i].ready == w.ready {
					a.waiters = append(a.waiters[:i], a.waiters[i+1:]...)
					break
				}
			}
			a.grantLocked()
		}
		return 0, ctx.Err()
	}
}

func (a *admission) release(n int) {
	a.mu.Lock()
	a.releaseLocked(n)
	a.mu.Unlock()
}

func (a *admission) releaseLocked(n int) {
	a.used -= n
	a.grantLocked()
}

func (a *admission) grantLocked() {
	for len(a.waiters) > 0 && a.used+a.waiters[0].n <= a.cap {
		a.used += a.waiters[0].n
		close(a.waiters[0].ready)
		a.waiters = a.waiters[1:]
	}
}

func (a *admission) inUse() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.used
}
