package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Member makes one consumer process a member of the fleet that shares the
// engines bucket. It publishes every shape its engine ran, pre-warms the
// shapes peers published for the same model and SM (so the JIT guard
// admits them here too), records the shapes the guard refused (wants) and,
// when the engine is idle, compiles wanted shapes under a compile lock so
// that no two members build the same engine. Start it with [Join];
// stop it with [Member.Stop].
//
// Goroutines: the watcher applies bucket changes to the state; the worker
// does the engine work (pre-warms, idle compiles) and publishes shapes;
// the writer records wants, so [Member.Want] never waits on the server or
// on a compile. [Member.Compile] runs on its caller's goroutine.
//
// Lock order: warmMu, then mu.
type Member struct {
	cfg     Config
	started time.Time
	kv      Store
	eng     Engine
	w       <-chan *Entry
	cancel  context.CancelFunc
	done    chan struct{}
	wants   chan shape
	kick    chan struct{} // the worker has pre-warms queued (capacity 1)
	warmMu  sync.Mutex    // held while pre-warming a shape

	ignored ignoredKeys // keys and values not taken from the bucket

	mu       sync.Mutex
	shapes   map[shape]ShapeRecord // own model and SM, in the bucket
	wanted   map[shape]bool
	locked   map[shape]bool
	changed  chan struct{} // closed and replaced on every change
	prewarm  []shape
	queued   map[shape]bool      // the shapes in prewarm
	tried    map[shape]bool      // shapes this member published (or found published)
	compiles []time.Time         // idle compiles within the last hour
	failed   map[shape]time.Time // wanted shapes this member failed to build, when

	stats counters
}

type shape struct{ batch, seq int }

func (s shape) String() string { return fmt.Sprintf("%dx%d", s.batch, s.seq) }

// Stats counts what a member did since it started, and what it knows
// of the bucket for its model and SM now.
type Stats struct {
	// Compiles are shapes this member built under the lock; Prewarms the
	// peers' shapes it loaded; Published the shapes its engine ran that it
	// put in the bucket; Wanted the want keys it created.
	Compiles, Prewarms, Published, Wanted int64
	// LockBusy counts compiles skipped or delayed because a peer held the
	// lock; Errors counts failed engine or bucket operations; Ignored the
	// keys of the bucket that were not used (unknown layout, a shape this
	// engine would never run, or a value that is not a record).
	LockBusy, Errors, Ignored int64
	// Ticks counts the worker's passes (each tick, or a kick by a new key
	// or want), counted after its pre-warms and publishing; IdleChecks
	// those of them that found the engine quiet for IdleQuiet and looked
	// for a wanted shape to compile, counted after the look. A test (or an
	// operator) waits on them to know the worker looked, not a guessed
	// sleep.
	Ticks, IdleChecks int64
	// Shapes, Wants and Locks are the keys in the bucket for this model
	// and SM.
	Shapes, Wants, Locks int
}

type counters struct {
	compiles, prewarms, published, wanted, lockBusy, errors atomic.Int64
	ticks, idleChecks                                       atomic.Int64
}

// Join joins the fleet: it reads the bucket's current keys for the
// model and SM of cfg (queuing pre-warms for the shapes eng lacks) before
// it returns, then follows the bucket until ctx ends or [Member.Stop].
func Join(ctx context.Context, kv Store, eng Engine, cfg Config) (*Member, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	f := &Member{
		cfg: cfg, kv: kv, started: time.Now().UTC(), eng: eng, cancel: cancel,
		done:    make(chan struct{}),
		wants:   make(chan shape, 256),
		kick:    make(chan struct{}, 1),
		shapes:  map[shape]ShapeRecord{},
		wanted:  map[shape]bool{},
		locked:  map[shape]bool{},
		changed: make(chan struct{}),
		tried:   map[shape]bool{},
		failed:  map[shape]time.Time{},
		ignored: ignoredKeys{log: cfg.Logger},
	}
	// One watch of the whole bucket, filtered in apply: the bucket is small
	// (a key per shape, want and lock of each model and SM).
	var err error
	if f.w, err = kv.Watch(runCtx); err != nil {
		stop()
		cancel()
		return nil, fmt.Errorf("fleet: watch: %w", err)
	}
	// The watcher sends the current values, then nil, then live changes.
	for initial := true; initial; {
		select {
		case e, ok := <-f.w:
			if !ok {
				stop()
				cancel()
				return nil, errors.New("fleet: watch ended before its initial values")
			}
			if e == nil {
				initial = false
				break
			}
			f.apply(e)
		case <-ctx.Done():
			stop()
			cancel()
			return nil, ctx.Err()
		}
	}
	// Logged before the goroutines start: from then on the state is theirs.
	cfg.Logger.Info("fleet joined", "model", cfg.Model, "sm", cfg.smToken(),
		"shapes", len(f.shapes), "wants", len(f.wanted), "locks", len(f.locked))
	rev := f.beat(runCtx, 0)
	var wg sync.WaitGroup
	wg.Go(func() { f.heartbeat(runCtx, rev) })
	wg.Go(f.watch)
	wg.Go(func() { f.work(runCtx) })
	wg.Go(func() { f.write(runCtx) })
	go func() {
		<-runCtx.Done() // ends the watch too
		wg.Wait()
		stop()
		close(f.done)
	}()
	return f, nil
}

// Stop leaves the fleet: it cancels a pre-warm or compile in progress
// (releasing its lock when the server is still reachable) and returns once
// every goroutine ended, or with ctx's error when ctx ends first (the
// goroutines still end; [Member.Done] says when).
func (f *Member) Stop(ctx context.Context) error {
	f.cancel()
	select {
	case <-f.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done is closed when the member has left the fleet: after [Member.Stop],
// or once the context [Join] was given ends.
func (f *Member) Done() <-chan struct{} { return f.done }

// Stats returns a snapshot; it is cheap and safe to call concurrently.
func (f *Member) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Stats{
		Compiles: f.stats.compiles.Load(), Prewarms: f.stats.prewarms.Load(),
		Published: f.stats.published.Load(), Wanted: f.stats.wanted.Load(),
		LockBusy: f.stats.lockBusy.Load(), Errors: f.stats.errors.Load(), Ignored: f.ignored.count(),
		Ticks: f.stats.ticks.Load(), IdleChecks: f.stats.idleChecks.Load(),
		Shapes: len(f.shapes), Wants: len(f.wanted), Locks: len(f.locked),
	}
}

// Want records that the JIT guard refused a chunk of batch x seq, so that
// an idle member compiles it. It never blocks (the job loop's wants
// hook); a shape already in the bucket or already wanted is
// not recorded again.
func (f *Member) Want(batch, seq int) {
	s := shape{batch, seq}
	if seq < f.cfg.MinSeq || f.eng.ShapeAdmissible(batch, seq) != nil {
		return
	}
	f.mu.Lock()
	_, have := f.shapes[s]
	known := have || f.wanted[s]
	f.mu.Unlock()
	if known {
		return
	}
	select {
	case f.wants <- s:
	default: // the writer is behind; the next refusal asks again
	}
}

// watch applies live bucket changes until the watcher stops. A watch that
// ends by itself (the connection closed for good) ends the fleet too: a
// member blind to the bucket would compile what peers already built.
func (f *Member) watch() {
	for e := range f.w {
		if e != nil {
			f.apply(e)
		}
	}
	f.cancel()
}

// apply records one bucket entry of this model and SM in the state and
// queues a pre-warm for a new shape the engine lacks. A key of no known
// layout, a shape this engine would never run and a value that is not a
// record are logged once and ignored (see fleet_validate.go).
func (f *Member) apply(e *Entry) {
	pk := ParseKey(e.Key)
	switch {
	case pk.Kind == KindUnknown:
		f.ignored.ignore(e.Key, "not a key of the fleet's layout")
		return
	case pk.Kind == KindProbe || pk.Kind == KindMember || pk.Shape.Model != f.cfg.modelToken() || pk.Shape.SM != f.cfg.smToken():
		return // probes are read by LoadProbe, members by Read; other models and SMs are the peers'
	}
	s := shape{pk.Shape.Batch, pk.Shape.Seq}
	if err := f.eng.ShapeAdmissible(s.batch, s.seq); err != nil {
		f.ignored.ignore(e.Key, err.Error())
		return
	}
	gone := e.Op != OpPut
	var rec ShapeRecord
	if !gone {
		var err error
		if pk.Kind == KindShape {
			rec, err = DecodeShapeRecord(e.Value)
		} else {
			_, err = DecodeLockRecord(e.Value)
		}
		if err != nil {
			f.ignored.ignore(e.Key, err.Error())
			return
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch pk.Kind {
	case KindShape:
		if gone {
			delete(f.shapes, s)
			break
		}
		_, had := f.shapes[s]
		f.shapes[s] = rec
		f.tried[s] = true
		// A shape already queued is not queued again: a key put and
		// deleted over and over while the engine is busy (nothing drains
		// the queue) would grow it without bound.
		if !had && s.seq >= f.cfg.MinSeq && !f.eng.ShapeWarmed(s.batch, s.seq) && !f.queued[s] {
			if f.queued == nil {
				f.queued = map[shape]bool{}
			}
			f.queued[s] = true
			f.prewarm = append(f.prewarm, s)
			select {
			case f.kick <- struct{}{}:
			default:
			}
		}
	case KindWant:
		f.setFlag(f.wanted, s, !gone)
	case KindLock:
		f.setFlag(f.locked, s, !gone)
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *Member) setFlag(m map[shape]bool, s shape, on bool) {
	if on {
		m[s] = true
	} else {
		delete(m, s)
	}
}

// write creates the want keys [Member.Want] queued.
func (f *Member) write(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-f.wants:
			k := f.cfg.key(s.batch, s.seq)
			rec := encodeRecord(WantRecord{By: f.cfg.Member, At: time.Now().UTC()})
			_, err := f.kv.Create(ctx, k.Want(), rec, f.cfg.WantTTL)
			switch {
			case err == nil:
				f.stats.wanted.Add(1)
				f.cfg.Logger.Info("fleet: shape wanted", "key", k.Want())
			case errors.Is(err, ErrExists):
			case ctx.Err() == nil:
				f.stats.errors.Add(1)
				f.cfg.Logger.Warn("fleet: recording a wanted shape", "key", k.Want(), "err", err)
			}
		}
	}
}

// changes returns a channel closed at the next change of the state.
func (f *Member) changes() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}
