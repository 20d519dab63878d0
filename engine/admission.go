package engine

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/jetembed/jetembed/internal/drain"
	"github.com/jetembed/jetembed/schema"
)

// admission is the one admission point: every Embed call, of every job
// and request, takes its real tokens from its class's budget here before
// its texts join the scheduler's queue, and waits here while the budget
// is full. Waiting calls are kept per class and per tenant; room is handed
// out interactive first, tenants by deficit round robin over tokens (a
// tenant of weight w gets w quanta a round), each tenant's calls in
// arrival order, so one tenant's flood delays the others by at most its
// share. The interactive class's waiting tokens are bounded
// ([Config.QueueTokens]): beyond it a tenant under its share pushes out
// the newest calls of the tenant holding the most, and a tenant at its
// share is refused overloaded.
type admission struct {
	mu     sync.Mutex
	budget [nClasses]int
	used   [nClasses]int
	queue  [nClasses]tenantRing
	bound  int // waiting interactive tokens
	// boundSet: the bound was configured, not derived from the budget.
	boundSet bool
	quantum  int
	weights  map[string]int
	meter    drain.Meter // interactive tokens released
	now      func() time.Time
}

// waiter is one call waiting for room.
type waiter struct {
	cl     class
	tenant string
	n      int
	ready  chan struct{} // closed when admitted or refused
	// admitted, or refusal, is set under the lock before ready closes.
	admitted bool
	refusal  *schema.Error
}

// tenantRing is one class's waiting calls: a FIFO per tenant, and the
// tenants with calls waiting in turn order.
type tenantRing struct {
	by     map[string]*tenantWait
	ring   []*tenantWait
	next   int
	tokens int
}

type tenantWait struct {
	name    string
	weight  int
	deficit int
	turn    bool // its quantum for the current visit was added
	calls   []*waiter
	tokens  int
}

func newAdmission(cfg Config) *admission {
	a := &admission{bound: cfg.QueueTokens, boundSet: cfg.QueueTokens > 0, quantum: cfg.MaxTokens, weights: cfg.TenantWeights, now: time.Now}
	a.setBudgets(cfg.AdmissionTokens, cfg.InteractiveTokens)
	return a
}

// setBudgets sets both budgets and admits what fits. a.mu is held (or a
// is new).
func (a *admission) setBudgets(bulkTokens, interactiveTokens int) {
	a.budget[bulk], a.budget[interactive] = bulkTokens, interactiveTokens
	if !a.boundSet {
		a.bound = 8 * interactiveTokens
	}
	a.grant()
}

func (a *admission) weight(tenant string) int {
	if w := a.weights[tenant]; w > 0 {
		return w
	}
	if w := a.weights[AnyTenant]; w > 0 {
		return w
	}
	return 1
}

// acquire takes n tokens of c's class (clamped to the budget, so one huge
// call runs alone rather than never), waiting as [Call] says. It returns
// the tokens held, or the refusal.
func (a *admission) acquire(ctx context.Context, c Call, n int) (int, *schema.Error) {
	cl := c.Class
	a.mu.Lock()
	n = min(n, a.budget[cl])
	q := &a.queue[cl]
	if q.tokens == 0 && a.used[cl]+n <= a.budget[cl] {
		a.take(cl, n)
		a.mu.Unlock()
		return n, nil
	}
	if c.NoWait {
		defer a.mu.Unlock()
		return 0, schema.Errorf(schema.CodeOverloaded, "%d tokens in flight, budget %d", a.used[cl], a.budget[cl])
	}
	now := a.now()
	lim := c.limit(now)
	w := &waiter{cl: cl, tenant: c.Tenant, n: n, ready: make(chan struct{})}
	evicted, refusal := a.room(w, lim, now)
	if refusal == nil {
		q.push(w, a.weight(c.Tenant))
		if len(evicted) > 0 {
			// The call whose turn it was may be gone: those behind it
			// that fit go now, not at the next release.
			a.grant()
		}
	}
	a.mu.Unlock()
	for _, e := range evicted {
		close(e.ready)
	}
	if refusal != nil {
		return 0, refusal
	}
	var expire <-chan time.Time
	if !lim.IsZero() {
		t := time.NewTimer(max(lim.Sub(now), 0))
		defer t.Stop()
		expire = t.C
	}
	var why *schema.Error
	select {
	case <-w.ready:
	case <-ctx.Done():
		why = schema.Errorf(schema.CodeDeadlineExceeded, "waiting for capacity: %v", ctx.Err())
	case <-expire:
		why = schema.Errorf(schema.CodeOverloaded, "waited %s for room without getting any%s", a.now().Sub(now).Round(time.Millisecond), a.retryHint(cl))
		if !c.Deadline.IsZero() && !a.now().Before(c.Deadline) {
			why = schema.Errorf(schema.CodeDeadlineExceeded, "deadline passed while the call waited for room")
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case w.admitted && why == nil:
		return n, nil
	case w.admitted && ctx.Err() == nil:
		return n, nil // admitted as its wait ran out: run it
	case w.admitted:
		a.releaseLocked(cl, n)
		return 0, why
	case w.refusal != nil:
		return 0, w.refusal
	}
	q.remove(w)
	a.grant()
	return 0, why
}

// room decides whether w may wait: within the interactive bound (pushing
// out the newest calls of a tenant over its share, returned to be woken
// once the lock is released), and able to start before lim at the
// measured drain rate. The push-out is planned first and done only when
// w is let in: a call refused anyway pushes nothing out. a.mu is held.
func (a *admission) room(w *waiter, lim, now time.Time) (evicted []*waiter, refusal *schema.Error) {
	q := &a.queue[w.cl]
	cl := w.cl
	var cut map[*tenantWait]int // tokens each tenant would lose to the push-out
	if cl == interactive && a.bound > 0 && q.tokens+w.n > a.bound {
		tenants := len(q.by)
		if q.by[w.tenant] == nil {
			tenants++
		}
		share := a.bound / max(tenants, 1)
		own := 0
		if tw := q.by[w.tenant]; tw != nil {
			own = tw.tokens
		}
		if own+w.n > share {
			return nil, schema.Errorf(schema.CodeOverloaded, "%s budget full (%d of %d tokens held) and %d tokens already waiting, %d of them this tenant's (its share: %d)%s",
				cl, a.used[cl], a.budget[cl], q.tokens, own, share, a.retryHintFor(cl, q.tokens+w.n))
		}
		var plan []*waiter
		plan, cut = q.pushOut(w.tenant, share, q.tokens+w.n-a.bound)
		left := q.tokens
		for _, x := range plan {
			left -= x.n
		}
		if left+w.n > a.bound && left > 0 {
			return nil, schema.Errorf(schema.CodeOverloaded, "%s budget full (%d of %d tokens held) and %d tokens already waiting%s",
				cl, a.used[cl], a.budget[cl], q.tokens, a.retryHintFor(cl, q.tokens+w.n))
		}
		evicted = plan
	}
	if cl == interactive && !lim.IsZero() {
		ahead := a.used[cl] + q.aheadAfter(w.tenant, w.n, cut) - a.budget[cl]
		if wait, ok := a.meter.Wait(ahead, now); ok && now.Add(wait).After(lim) {
			return nil, schema.Errorf(schema.CodeOverloaded, "%s budget full: at the measured %.0f tokens/s this call would start in about %s, after its deadline%s",
				cl, a.meter.Rate(), wait.Round(time.Millisecond), a.retryHintFor(cl, ahead+a.budget[cl]))
		}
	}
	for _, x := range evicted {
		q.remove(x)
	}
	for _, x := range evicted {
		x.refusal = schema.Errorf(schema.CodeOverloaded, "pushed out of the %s queue by another tenant's call: this tenant holds more than its share%s", cl, a.retryHintFor(cl, q.tokens))
	}
	return evicted, nil
}

// pushOut plans which calls to push out to free need tokens: the newest
// calls of the tenant other than tenant that holds the most, while it
// holds more than share. It changes nothing; cut is the tokens each
// tenant would lose.
func (q *tenantRing) pushOut(tenant string, share, need int) (plan []*waiter, cut map[*tenantWait]int) {
	cut = map[*tenantWait]int{}
	taken := map[*tenantWait]int{} // calls from the tail
	for need > 0 {
		var hog *tenantWait
		for t, tw := range q.by {
			if t != tenant && (hog == nil || tw.tokens-cut[tw] > hog.tokens-cut[hog]) {
				hog = tw
			}
		}
		if hog == nil || hog.tokens-cut[hog] <= share {
			break
		}
		x := hog.calls[len(hog.calls)-1-taken[hog]]
		taken[hog]++
		cut[hog] += x.n
		need -= x.n
		plan = append(plan, x)
	}
	return plan, cut
}

// aheadAfter is the tokens that would be admitted before a call of n
// tokens of tenant, were it queued now, its own included, once the other
// tenants have lost cut: every tenant's waiting calls up to as many
// tokens as tenant will have waiting (the turns interleave them).
func (q *tenantRing) aheadAfter(tenant string, n int, cut map[*tenantWait]int) int {
	own := n
	if tw := q.by[tenant]; tw != nil {
		own += tw.tokens
	}
	total := own
	for t, tw := range q.by {
		if t != tenant {
			total += min(tw.tokens-cut[tw], own)
		}
	}
	return total
}

// take charges n tokens to class cl. a.mu is held.
func (a *admission) take(cl class, n int) {
	if cl == interactive {
		a.meter.Tick(a.now(), a.used[cl] > 0, 0)
	}
	a.used[cl] += n
}

func (a *admission) release(cl class, n int) {
	a.mu.Lock()
	a.releaseLocked(cl, n)
	a.mu.Unlock()
}

func (a *admission) releaseLocked(cl class, n int) {
	if cl == interactive {
		a.meter.Tick(a.now(), true, n)
	}
	a.used[cl] -= n
	a.grant()
}

// grant admits waiting calls while they fit: interactive first, then
// bulk; within a class, tenants by deficit round robin. A class whose
// next call does not fit admits nothing more (no call passes the one
// whose turn it is). a.mu is held.
func (a *admission) grant() {
	for _, cl := range [...]class{interactive, bulk} {
		q := &a.queue[cl]
		for len(q.ring) > 0 {
			if q.next >= len(q.ring) {
				q.next = 0
			}
			tw := q.ring[q.next]
			if !tw.turn {
				tw.deficit += a.quantum * tw.weight
				tw.turn = true
			}
			w := tw.calls[0]
			if w.n > tw.deficit {
				tw.turn = false
				q.next++
				continue
			}
			if a.used[cl]+w.n > a.budget[cl] {
				break
			}
			tw.deficit -= w.n
			q.remove(w)
			a.take(cl, w.n)
			w.admitted = true
			close(w.ready)
		}
	}
}

// retryHintFor tells a refused caller when excess tokens over the budget
// will have drained at the measured rate. a.mu is held.
func (a *admission) retryHintFor(cl class, waiting int) string {
	if cl != interactive {
		return ""
	}
	wait, ok := a.meter.Wait(a.used[cl]+waiting-a.budget[cl], a.now())
	if !ok {
		return ""
	}
	return ": retry in about " + time.Duration(math.Ceil(max(wait.Seconds(), 1))*float64(time.Second)).String()
}

func (a *admission) retryHint(cl class) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.retryHintFor(cl, a.queue[cl].tokens)
}

// inUse is the tokens admitted, both classes.
func (a *admission) inUse() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.used[bulk] + a.used[interactive]
}

// waiting is the calls waiting for room, both classes.
func (a *admission) waiting() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for cl := range a.queue {
		for _, tw := range a.queue[cl].ring {
			n += len(tw.calls)
		}
	}
	return n
}

// budgets are the two classes' budgets.
func (a *admission) budgets() (bulkTokens, interactiveTokens int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.budget[bulk], a.budget[interactive]
}

// SetBudgets sets the in-flight token budgets the engine admits by, bulk
// and interactive ([Config.AdmissionTokens], [Config.InteractiveTokens]);
// 0 or less keeps the engine's. Calls waiting for room are admitted if
// they fit now. A budget below the longest text is allowed: a call over
// it runs alone. A serving process (package node) sets them once, from its
// one configuration, before any call. It returns the budgets in force.
func (e *Engine) SetBudgets(inFlight, interactiveTokens int) (bulkTokens, interactiveBudget int, err error) {
	e.adm.mu.Lock()
	defer e.adm.mu.Unlock()
	if inFlight <= 0 {
		inFlight = e.adm.budget[bulk]
	}
	if interactiveTokens <= 0 {
		interactiveTokens = e.adm.budget[interactive]
	}
	e.adm.setBudgets(inFlight, interactiveTokens)
	return inFlight, interactiveTokens, nil
}

// Budgets are the in-flight token budgets the engine admits by: bulk and
// interactive.
func (e *Engine) Budgets() (inFlight, interactiveTokens int) { return e.adm.budgets() }

// push adds w behind its tenant's calls. A tenant with none waiting joins
// the turn just before the tenant whose turn it is: last in the round, so
// that a tenant whose queue empties at every admission cannot come back
// first each time and take every release ahead of the tenants that wait.
func (q *tenantRing) push(w *waiter, weight int) {
	if q.by == nil {
		q.by = map[string]*tenantWait{}
	}
	tw := q.by[w.tenant]
	if tw == nil {
		tw = &tenantWait{name: w.tenant, weight: weight}
		q.by[w.tenant] = tw
		q.next = min(q.next, len(q.ring))
		q.ring = append(q.ring, nil)
		copy(q.ring[q.next+1:], q.ring[q.next:])
		q.ring[q.next] = tw
		q.next++
	}
	tw.calls = append(tw.calls, w)
	tw.tokens += w.n
	q.tokens += w.n
}

// remove takes w out; false when it was not waiting. A tenant left with
// nothing waiting leaves the turn (and its deficit).
func (q *tenantRing) remove(w *waiter) bool {
	tw := q.by[w.tenant]
	if tw == nil {
		return false
	}
	i := -1
	for k, x := range tw.calls {
		if x == w {
			i = k
			break
		}
	}
	if i < 0 {
		return false
	}
	tw.calls = append(tw.calls[:i], tw.calls[i+1:]...)
	tw.tokens -= w.n
	q.tokens -= w.n
	if len(tw.calls) > 0 {
		return true
	}
	delete(q.by, w.tenant)
	for k, t := range q.ring {
		if t == tw {
			q.ring = append(q.ring[:k], q.ring[k+1:]...)
			if k < q.next {
				q.next--
			}
			break
		}
	}
	return true
}

// failAll refuses every waiting call with se (the engine closed).
func (a *admission) failAll(se *schema.Error) {
	a.mu.Lock()
	var all []*waiter
	for cl := range a.queue {
		for _, tw := range a.queue[cl].ring {
			all = append(all, tw.calls...)
		}
		a.queue[cl] = tenantRing{}
	}
	for _, w := range all {
		w.refusal = se
	}
	a.mu.Unlock()
	for _, w := range all {
		close(w.ready)
	}
}
