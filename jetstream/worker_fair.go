package jetstream

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// tenantPull runs one fetch loop a tenant's consumer, all into one
// [fairGate]; it finds the tenants, creates their consumers from the
// template, keeps them in step with it and retires the idle ones.
type tenantPull struct {
	w      *Worker
	prefix string
	gate   *fairGate
	q      *quotas
	idle   time.Duration
	scan   time.Duration
	max    int // consumers of tenants the shares do not name
	shares Shares

	mu       sync.Mutex // guards the fields below; no server call under it
	loops    map[string]*tenantLoop
	lastScan time.Time
	// waiting is how many tenants with jobs the last scan left without a
	// consumer (the unnamed ones were at tp.max); freed is set when a
	// consumer retired since, so the next sync scans again.
	waiting int
	warned  time.Time
	// queued is since when each unnamed tenant with jobs and no consumer
	// has waited for a slot: since a scan first saw it so, or since its
	// consumer yielded its slot; free slots go to the longest waiting
	// (newcomers). An entry goes when its tenant gets a consumer or has no
	// jobs left.
	queued   map[string]time.Time
	freed    bool
	stopped  bool
	done     chan struct{} // closed when a loop ended on its own
	doneOnce sync.Once
}

type tenantLoop struct {
	tenant, name string
	mu           sync.Mutex
	loop         *PullLoop
	sink         gateSink // loop's way into the gate
	emptySince   time.Time
	since        time.Time // when this member first saw the consumer
	created      time.Time // the consumer's creation (server time): which consumer of the name since is of
	stopping     bool
	yielding     bool      // its slot's lease is up: the loop is stopped, the consumer goes when nothing is in flight
	yieldAt      time.Time // when yielding began
}

// leave marks tl's loop as ended on purpose (its end is no news) and
// returns it, nil if none, with its sink in the fair gate.
func (tl *tenantLoop) leave() (*PullLoop, gateSink) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.stopping = true
	return tl.loop, tl.sink
}

func (tl *tenantLoop) get() *PullLoop {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return tl.loop
}

func newTenantPull(w *Worker, prefix string, q *quotas, sink Sink) *tenantPull {
	f := w.cfg.Fair
	idle, scan := f.Idle, f.Scan
	if idle <= 0 {
		idle = DefaultTenantIdle
	}
	if scan <= 0 {
		scan = DefaultTenantScan
	}
	maxTenants := f.MaxTenants
	if maxTenants <= 0 {
		maxTenants = DefaultMaxTenants
	}
	return &tenantPull{w: w, prefix: prefix, q: q, gate: newFairGate(sink, f.Shares, q), idle: idle, scan: scan,
		max: maxTenants, shares: f.Shares,
		loops: map[string]*tenantLoop{}, done: make(chan struct{})}
}

// Done is closed when a tenant's fetch loop ended on its own (the
// connection closed).
func (tp *tenantPull) Done() <-chan struct{} { return tp.done }

// prefetch sums the loops' prefetch.
func (tp *tenantPull) prefetch() int {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	n := 0
	for _, tl := range tp.loops {
		if l := tl.get(); l != nil {
			n += l.Prefetch()
		}
	}
	return n
}

// listTenants returns the consumers made from template, by tenant.
func (tp *tenantPull) listTenants(ctx context.Context, template string) (map[string]*natsjs.ConsumerInfo, error) {
	s, err := tp.w.js.Stream(ctx, tp.w.cfg.Config.Jobs.Name)
	if err != nil {
		return nil, err
	}
	out := map[string]*natsjs.ConsumerInfo{}
	lister := s.ListConsumers(ctx)
	for info := range lister.Info() {
		if info.Config.Metadata[MetaTemplate] != template {
			continue
		}
		if t := info.Config.Metadata[MetaTenant]; t != "" && info.Name == TenantConsumerName(template, t) {
			out[t] = info
		}
	}
	return out, lister.Err()
}

// scanTenants lists the tenants that have jobs in the stream.
func (tp *tenantPull) scanTenants(ctx context.Context) (map[string]bool, error) {
	s, err := tp.w.js.Stream(ctx, tp.w.cfg.Config.Jobs.Name)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx, natsjs.WithSubjectFilter(tp.prefix+".>"))
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for subj := range info.State.Subjects {
		if t, ok := tenantOfSubject(tp.prefix, subj); ok {
			out[t] = true
		}
	}
	return out, nil
}

// sync brings the tenants' consumers and loops in line with the server:
// it lists them, creates the missing ones of tenants with jobs (after a
// scan; those of unnamed tenants up to tp.max), updates the ones whose
// settings differ from template's, deletes the ones idle for longer than
// tp.idle (see reconcile), and starts or stops loops to match. reopen reopens every loop (the template's settings changed). It
// returns the backlog over every tenant's consumer.
func (tp *tenantPull) sync(ctx context.Context, template natsjs.ConsumerConfig, st ServerSettings, reopen bool) (pending uint64, ackPending int, err error) {
	js, log := tp.w.js, tp.w.log
	stream := tp.w.cfg.Config.Jobs.Name
	infos, err := tp.listTenants(ctx, template.Durable)
	if err != nil {
		return 0, 0, fmt.Errorf("list the tenants' consumers: %w", err)
	}
	var covered uint64
	unnamed := 0
	for t, info := range infos {
		if !tp.shares.Names(t) {
			unnamed++
		}
		want := tenantConsumerConfig(template, tp.prefix, t)
		if !settingsOf(info.Config).equal(settingsOf(want)) {
			if _, err := js.CreateOrUpdateConsumer(ctx, stream, want); err != nil {
				log.Warn("tenant's consumer not brought in step with the template", "tenant", t, "err", err)
			}
		}
		pending += info.NumPending
		ackPending += info.NumAckPending
		covered += info.NumPending + uint64(info.NumAckPending)
	}
	now := time.Now()
	tp.mu.Lock()
	first, last := tp.lastScan.IsZero(), tp.lastScan
	// While tenants wait for a slot, jobs no consumer covers are no news:
	// only a slot freed is, by this member or by anyone (another member,
	// an operator: the list has fewer than the bound).
	news := tp.waiting == 0 || tp.freed || unnamed < tp.max
	tp.mu.Unlock()
	scan := first || now.Sub(last) >= tp.scan
	if !scan && news && now.Sub(last) >= tp.w.cfg.Refresh {
		// Jobs no consumer covers: a new tenant (or one retired).
		if s, err := js.Stream(ctx, stream); err == nil && s.CachedInfo().State.Msgs > covered {
			scan = true
		}
	}
	if scan {
		tp.mu.Lock()
		tp.lastScan, tp.freed = now, false
		tp.mu.Unlock()
		tenants, err := tp.scanTenants(ctx)
		if err != nil {
			log.Warn("listing the tenants with jobs", "err", err)
		}
		waiting := 0
		for _, t := range tp.newcomers(tenants, infos, now) {
			named := tp.shares.Names(t)
			if !named && unnamed >= tp.max {
				waiting++
				continue
			}
			info, err := js.CreateOrUpdateConsumer(ctx, stream, tenantConsumerConfig(template, tp.prefix, t))
			if err != nil {
				log.Warn("tenant's consumer not created; its jobs wait in the stream", "tenant", t, "err", err)
				continue
			}
			if !named {
				unnamed++
			}
			log.Info("tenant's consumer created", "tenant", t, "consumer", info.CachedInfo().Name)
			infos[t] = info.CachedInfo()
			pending += infos[t].NumPending
		}
		tp.mu.Lock()
		// When tenants start to wait, then at most once a scan interval:
		// while the slots go round the count changes at every scan.
		warn := waiting > 0 && (tp.waiting == 0 || now.Sub(tp.warned) >= tp.scan)
		tp.waiting = waiting
		if warn {
			tp.warned = now
		}
		tp.mu.Unlock()
		if warn {
			log.Warn("tenants with jobs wait for a consumer: the consumers of tenants the shares do not name are at their bound; until none wait, an empty one is retired at once and one held for the tenant idle time yields its slot",
				"waiting", waiting, "max_tenants", tp.max)
		}
	}
	tp.reconcile(ctx, infos, st, reopen, now)
	return pending, ackPending, nil
}

// newcomers are the tenants with jobs that have no consumer in infos, in
// the order they get one: those the shares name first, then the others by
// how long they have waited for a slot (tp.queued), those first seen at
// once in a random order (by name, a minted "000..." would always go
// first). A tenant whose consumer yields its slot waits again from then:
// behind those that waited while it held the slot, ahead of tenants that
// appear after it (a producer minting new tenants cannot keep it out).
func (tp *tenantPull) newcomers(tenants map[string]bool, infos map[string]*natsjs.ConsumerInfo, now time.Time) []string {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	for t := range tp.queued {
		if !tenants[t] || infos[t] != nil {
			delete(tp.queued, t)
		}
	}
	var named, other []string
	for t := range tenants {
		switch {
		case infos[t] != nil:
		case tp.shares.Names(t):
			named = append(named, t)
		default:
			if _, ok := tp.queued[t]; !ok {
				if tp.queued == nil {
					tp.queued = map[string]time.Time{}
				}
				tp.queued[t] = now
			}
			other = append(other, t)
		}
	}
	slices.Sort(named)
	rand.Shuffle(len(other), func(i, j int) { other[i], other[j] = other[j], other[i] })
	slices.SortStableFunc(other, func(a, b string) int { return tp.queued[a].Compare(tp.queued[b]) })
	return append(named, other...)
}

// reconcile starts a loop for every consumer in infos that has none,
// reopens them all when reopen, stops the loops of consumers gone, and
// retires the consumers empty for longer than tp.idle (at once, for an
// unnamed tenant's, while tenants wait for a slot, when also those held
// for tp.idle yield: see leasesUp).
func (tp *tenantPull) reconcile(ctx context.Context, infos map[string]*natsjs.ConsumerInfo, st ServerSettings, reopen bool, now time.Time) {
	type retiring struct {
		tl   *tenantLoop
		idle time.Duration
	}
	var retire []retiring
	var yield []*tenantLoop
	tp.mu.Lock()
	if tp.stopped {
		tp.mu.Unlock()
		return
	}
	for t, tl := range tp.loops {
		if infos[t] == nil {
			delete(tp.loops, t)
			go tp.stopLoop(tl)
		}
	}
	for t, info := range infos {
		tl := tp.loops[t]
		if tl == nil {
			tl = &tenantLoop{tenant: t, name: info.Name, since: now, created: info.Created}
			tp.loops[t] = tl
		} else if !info.Created.Equal(tl.created) {
			// Another consumer of the name: the one tl saw was retired and
			// made again elsewhere between two lists (another member's scan
			// gave the tenant a slot anew). Its lease starts now; were it
			// yielding, its loop starts again below.
			tl.created, tl.since, tl.emptySince = info.Created, now, time.Time{}
		}
	}
	leaseUp := tp.leasesUp(now)
	for t, info := range infos {
		tl := tp.loops[t]
		// While tenants wait, an unnamed tenant that never empties does
		// not keep its slot for ever: after tp.idle its loop stops pulling
		// and hands what it buffered to the job loop (yieldLoop), and once
		// nothing of it is in flight its consumer is retired with jobs
		// left, which wait for a slot again. The server counts a message
		// whose ack wait ran out (a member that died holding it) or that
		// was NAKed as pending an ack until it is delivered again, which
		// no one does while every member yields: so a consumer yielding
		// for an ack wait is retired all the same (a job still running
		// then, kept alive by its heartbeats, is answered twice at worst,
		// never lost: the stream keeps it).
		if leaseUp[t] {
			if info.NumAckPending == 0 || tl.yielding && now.Sub(tl.yieldAt) >= yieldGrace(st, info) {
				delete(tp.loops, t)
				retire = append(retire, retiring{tl, tp.idle})
				if tp.queued == nil {
					tp.queued = map[string]time.Time{}
				}
				tp.queued[t] = now
				continue
			}
			if !tl.yielding {
				tl.yielding, tl.yieldAt = true, now
				yield = append(yield, tl)
			}
			continue
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			idle := tp.idle
			if tp.waiting > 0 && !tp.shares.Names(t) {
				idle = 0
			}
			if tl.emptySince.IsZero() {
				tl.emptySince = now
			}
			if now.Sub(tl.emptySince) >= idle {
				delete(tp.loops, t)
				retire = append(retire, retiring{tl, idle})
				continue
			}
		} else {
			tl.emptySince = time.Time{}
		}
		if tl.get() == nil || reopen || tl.yielding {
			if err := tp.startLoop(ctx, tl, st); err != nil {
				tp.w.log.Warn("tenant's fetch loop not started", "tenant", t, "err", err)
			} else if tl.yielding {
				// No longer yielding (none wait): its loop runs again, and
				// its end is news again (tl.loop is the new one already).
				tl.yielding = false
				tl.mu.Lock()
				tl.stopping = false
				tl.mu.Unlock()
			}
		}
	}
	tp.mu.Unlock()
	for _, tl := range yield {
		tp.yieldLoop(tl)
		tp.w.log.Info("tenant's consumer yields its slot to waiting tenants", "tenant", tl.tenant, "held", now.Sub(tl.since).Round(time.Second).String())
	}
	for _, r := range retire {
		tl := r.tl
		tp.stopLoop(tl)
		// Another member may still pull from it: its requests fail until
		// it sees the consumer gone. A job that came meanwhile stays in the
		// stream and gets the consumer back at the next scan.
		if err := tp.w.js.DeleteConsumer(ctx, tp.w.cfg.Config.Jobs.Name, tl.name); err != nil && !errors.Is(err, natsjs.ErrConsumerNotFound) {
			tp.w.log.Warn("idle tenant's consumer not deleted", "tenant", tl.tenant, "err", err)
			continue
		}
		tp.w.log.Info("idle tenant's consumer retired", "tenant", tl.tenant, "idle", r.idle.String())
		tp.mu.Lock()
		tp.freed = true
		tp.mu.Unlock()
	}
}

// yieldGrace is how long a yielding consumer waits for its messages
// pending an ack before it is retired anyway: the consumers' ack wait
// (the server's default, 30 s, when none is set).
func yieldGrace(st ServerSettings, info *natsjs.ConsumerInfo) time.Duration {
	switch {
	case st.AckWait > 0:
		return st.AckWait
	case info.Config.AckWait > 0:
		return info.Config.AckWait
	}
	return 30 * time.Second
}

// leasesUp chooses the unnamed tenants whose consumers yield their slots
// now: of those held for tp.idle, as many as tenants wait, the oldest
// consumers first (by their creation on the server, then name: the order
// every member sees, so that the members pulling a consumer yield the
// same ones; it is retired only once none pulls it). Those yielding
// already are among them; one that is no longer chosen (an older one's
// lease came up since) pulls again. tp.mu is held.
func (tp *tenantPull) leasesUp(now time.Time) map[string]bool {
	if tp.waiting == 0 {
		return nil
	}
	var due []*tenantLoop
	for t, tl := range tp.loops {
		if !tp.shares.Names(t) && now.Sub(tl.since) >= tp.idle { // (a new consumer of the name starts its lease)
			due = append(due, tl)
		}
	}
	slices.SortFunc(due, func(a, b *tenantLoop) int {
		if c := a.created.Compare(b.created); c != 0 {
			return c
		}
		return strings.Compare(a.tenant, b.tenant)
	})
	up := map[string]bool{}
	for _, tl := range due[:min(tp.waiting, len(due))] {
		up[tl.tenant] = true
	}
	return up
}

// startLoop opens (or reopens: the old one drains) tl's fetch loop.
// tp.mu is held.
func (tp *tenantPull) startLoop(ctx context.Context, tl *tenantLoop, st ServerSettings) error {
	jc, err := tp.w.js.Consumer(ctx, tp.w.cfg.Config.Jobs.Name, tl.name)
	if err != nil {
		return err
	}
	more := func() bool {
		l := tl.get()
		return l != nil && l.hasMore()
	}
	sink := tp.gate.forTenant(tl.tenant, more)
	q, tenant := tp.q, tl.tenant
	opts := []PullOption{pullHold(func() time.Duration { return q.wait(tenant) })}
	if q.limited(tenant) {
		opts = append(opts, pullMinOne())
	}
	loop, err := tp.w.pullWith(jc, st, sink, opts...)
	if err != nil {
		// The tenant's loop that runs (a reopen's) keeps its place in
		// the gate; with none, the tenant has none.
		tl.mu.Lock()
		old, oldSink := tl.loop, tl.sink
		tl.mu.Unlock()
		if old != nil && !ended(old) {
			tp.gate.reinstate(oldSink, sink)
		} else {
			tp.gate.forget(sink)
		}
		return err
	}
	tl.mu.Lock()
	old := tl.loop
	tl.loop, tl.sink = loop, sink
	tl.mu.Unlock()
	if old != nil {
		old.Drain()
	}
	go func() {
		<-loop.Done()
		tl.mu.Lock()
		asked := tl.stopping || tl.loop != loop
		tl.mu.Unlock()
		if !asked {
			tp.doneOnce.Do(func() { close(tp.done) })
		}
	}()
	return nil
}

// ended reports whether l has ended.
func ended(l *PullLoop) bool {
	select {
	case <-l.Done():
		return true
	default:
		return false
	}
}

// stopLoop stops tl's loop (its buffered messages go back at once) and
// waits for it.
func (tp *tenantPull) stopLoop(tl *tenantLoop) {
	loop, sink := tl.leave()
	if loop == nil {
		return
	}
	loop.Stop()
	<-loop.Done()
	tp.gate.forget(sink)
}

// yieldLoop ends tl's fetch loop for its slot's lease: it stops pulling
// and hands what it buffered to the job loop, which answers and ACKs it.
// Stopping it (stopLoop) would NAK that buffer, and the server counts a
// NAKed message as pending an ack until it is delivered again, which no
// one does while the members yield: the consumer would wait out an ack
// wait before it could be retired, its slot empty, and its NAKed jobs
// would be answered later than they could have been.
func (tp *tenantPull) yieldLoop(tl *tenantLoop) {
	loop, sink := tl.leave()
	if loop == nil {
		return
	}
	loop.Drain()
	go func() {
		<-loop.Done()
		tp.gate.forget(sink)
	}()
}

// stop stops every loop and waits for them.
func (tp *tenantPull) stop() {
	tp.mu.Lock()
	tp.stopped = true
	loops := make([]*tenantLoop, 0, len(tp.loops))
	for _, tl := range tp.loops {
		loops = append(loops, tl)
	}
	tp.mu.Unlock()
	var wg sync.WaitGroup
	for _, tl := range loops {
		wg.Add(1)
		go func() { defer wg.Done(); tp.stopLoop(tl) }()
	}
	wg.Wait()
}

// tenants lists the tenants with a running loop, sorted.
func (tp *tenantPull) tenants() []string {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	var out []string
	for t := range tp.loops {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}
