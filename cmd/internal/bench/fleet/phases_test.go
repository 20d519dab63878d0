package fleet

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/internal/natstest"
)

// drain starts the members on the backlog, measures the steady state
// until 40% of it is done, then churns (N/2 members added, N/8 killed, N/8
// stopped gracefully) and waits for the rest.
func (f *fleetRun) drain(ctx context.Context, r *rig, sent []string) {
	f.t.Helper()
	p, rep, l := f.rep.plan, f.rep, f.env.ledger
	cpu0, srv0 := selfCPU(), r.serverCPU()
	t0 := time.Now()
	initial := f.startN(ctx, p.members)
	tAll := time.Now()
	rep.startTook = tAll.Sub(t0)
	f.t.Logf("%d members started in %v", p.members, rep.startTook.Round(time.Millisecond))

	f.waitStored(ctx, r, uint64(len(sent)*2/5))
	tChurn := time.Now()
	rep.steadyWindow = tChurn.Sub(tAll)
	steady := l.ackedIn(tAll, tChurn)
	for _, i := range initial {
		rep.shares = append(rep.shares, steady[i])
		rep.steadyJobs += steady[i]
	}

	add, kill, stop := max(p.members/2, 1), max(p.members/8, 1), max(p.members/8, 1)
	if kill+stop >= p.members { // keep one initial member
		kill, stop = min(kill, p.members-1), 0
	}
	rep.added, rep.killed, rep.stopped = add, kill, stop
	added := f.startN(ctx, add)
	var wg sync.WaitGroup
	for k, i := range initial[:kill+stop] {
		m := f.remove(i)
		held := m.w.Loop().Stats().Held
		if k < kill {
			rep.heldAtKill += held
			l.setFate(i, killed)
			wg.Go(m.kill)
			continue
		}
		rep.heldAtStop += held
		l.setFate(i, stopped)
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := m.stop(sctx); err != nil {
				f.t.Logf("graceful stop of %s: %v", m.name, err)
			}
		})
	}
	wg.Wait()
	f.t.Logf("churn: +%d members, %d killed, %d stopped", add, kill, stop)

	f.waitStored(ctx, r, uint64(len(sent)))
	tEnd := time.Now()
	rep.drainTook = tEnd.Sub(tAll)
	rep.selfCPU = selfCPU() - cpu0
	for i, c := range r.serverCPU() {
		rep.nodeCPU = append(rep.nodeCPU, c-srv0[i])
		rep.serverCPU += c - srv0[i]
	}
	rep.nodeRoles = r.leaders(ctx)
	for _, i := range added {
		f.mu.Lock()
		m := f.members[i]
		f.mu.Unlock()
		if at, ok := l.firstDelivery(i); ok && m != nil {
			rep.takeWork = append(rep.takeWork, at.Sub(m.started))
			rep.readyToWork = append(rep.readyToWork, at.Sub(m.ready))
		}
	}
	sortedDurations(rep.takeWork)
	sortedDurations(rep.readyToWork)
}

// waitStored waits until the results stream holds n results.
func (f *fleetRun) waitStored(ctx context.Context, r *rig, n uint64) {
	f.t.Helper()
	last, lastAt := uint64(0), time.Now()
	for {
		got, err := r.resultCount(ctx)
		if err == nil && got >= n {
			return
		}
		if got > last {
			last, lastAt = got, time.Now()
		}
		if time.Since(lastAt) > 2*time.Minute {
			f.t.Fatalf("results stuck at %d of %d for 2 minutes", last, n)
		}
		select {
		case <-ctx.Done():
			f.t.Fatalf("results: %d of %d when the run timed out", last, n)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// The shapes of the fleet-at-scale part: one a member compiles alone, one
// every member wants at once.
var (
	soloShape = engine.Shape{Batch: 1, Seq: 4096}
	herdShape = engine.Shape{Batch: 2, Seq: 4096}
)

// warm has one member compile a shape and times its arrival on every
// other live member, then has all live members ask for another shape at
// the same moment and counts the compiles.
func (f *fleetRun) warm(ctx context.Context) {
	f.t.Helper()
	rep, plans := f.rep, f.env.plans
	ms := f.live()
	rep.warmMembers = len(ms)
	if err := ms[0].fl.Compile(ctx, soloShape.Batch, soloShape.Seq); err != nil {
		f.t.Fatalf("compile %v: %v", soloShape, err)
	}
	natstest.CheckFor(f.t, 2*time.Minute, 50*time.Millisecond, func() error {
		if n := len(plans.loadedAt(soloShape)); n < len(ms) {
			return fmt.Errorf("%d of %d members pre-warmed %v", n, len(ms), soloShape)
		}
		return nil
	})
	at := plans.loadedAt(soloShape)
	built := at[ms[0].name]
	for _, m := range ms[1:] {
		rep.prewarm = append(rep.prewarm, at[m.name].Sub(built))
	}
	sortedDurations(rep.prewarm)

	var before int64
	for _, m := range ms {
		before += m.fl.Stats().Compiles
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, len(ms))
	for _, m := range ms {
		wg.Go(func() {
			if err := m.fl.Compile(ctx, herdShape.Batch, herdShape.Seq); err != nil {
				errs <- fmt.Errorf("%s: %w", m.name, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		f.t.Error(err)
	}
	rep.herdTook = time.Since(start)
	rep.wanters = len(ms)
	rep.lockedCompiles = plans.compileCount(herdShape)
	for _, m := range ms {
		st := m.fl.Stats()
		rep.fleetCompiles += st.Compiles
		rep.lockBusy += st.LockBusy
	}
	rep.fleetCompiles -= before
	for _, m := range ms {
		rep.published += m.fl.Stats().Published
	}
	rep.bucketKeys = ms[0].fl.Stats().Shapes
}
