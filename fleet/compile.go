package fleet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"time"
)

var (
	// ErrStopped is returned by [Member.Compile] when the fleet stops
	// while it waits for a peer's compile.
	ErrStopped = errors.New("fleet stopped")

	// errLockBusy means a peer holds the compile lock of a shape.
	errLockBusy = errors.New("fleet: compile lock held by a peer")
)

// work is the worker: it pre-warms queued shapes as soon as they arrive
// while the engine has no work queued or running, and on every tick
// publishes the shapes the engine ran and, once the engine has been idle
// for IdleQuiet, compiles one wanted shape.
func (f *Member) work(ctx context.Context) {
	t := time.NewTicker(f.cfg.Tick)
	defer t.Stop()
	_, lastRuns := f.eng.Activity()
	quietSince := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.kick:
		case <-t.C:
		}
		busy, runs := f.eng.Activity()
		if !busy {
			// A pre-warm takes the sessions for a run each (a plan load on
			// TensorRT): it waits for a moment with no work queued.
			f.prewarmQueued(ctx)
		}
		f.publishRan(ctx)
		f.stats.ticks.Add(1)
		if busy || runs != lastRuns || f.cfg.Busy != nil && f.cfg.Busy() {
			quietSince, lastRuns = time.Now(), runs
			continue
		}
		if time.Since(quietSince) < f.cfg.IdleQuiet {
			continue
		}
		compiled := f.compileWanted(ctx)
		// Counted once the look is over, so that a waiter sees its outcome.
		f.stats.idleChecks.Add(1)
		if compiled {
			// Its own runs are not traffic: measure quiet from here.
			_, lastRuns = f.eng.Activity()
			quietSince = time.Now()
		}
	}
}

// prewarmQueued warms the peers' shapes the watcher queued.
func (f *Member) prewarmQueued(ctx context.Context) {
	for ctx.Err() == nil {
		f.mu.Lock()
		if len(f.prewarm) == 0 {
			f.mu.Unlock()
			return
		}
		s := f.prewarm[0]
		f.prewarm = f.prewarm[1:]
		delete(f.queued, s)
		f.mu.Unlock()
		if err := f.prewarmOne(ctx, s); err != nil && ctx.Err() == nil {
			f.stats.errors.Add(1)
			f.cfg.Logger.Warn("fleet: pre-warm failed", "shape", s.String(), "err", err)
		}
	}
}

// prewarmOne warms a shape a peer built, unless the engine has it. The
// worker and [Member.Compile] may both reach the same shape; warmMu makes
// the second find it warmed instead of loading it again.
func (f *Member) prewarmOne(ctx context.Context, s shape) error {
	f.warmMu.Lock()
	defer f.warmMu.Unlock()
	if f.eng.ShapeWarmed(s.batch, s.seq) {
		return nil
	}
	start := time.Now()
	if err := f.eng.WarmShape(ctx, s.batch, s.seq); err != nil {
		return fmt.Errorf("fleet: pre-warm %v: %w", s, err)
	}
	f.stats.prewarms.Add(1)
	f.cfg.Logger.Info("fleet: pre-warmed a peer's shape", "shape", s.String(), "took", time.Since(start))
	return nil
}

// publishRan puts every shape the engine ran (start-up warm-up, in-band
// runs) that the bucket lacks, with a create: the first record of a shape
// stays.
func (f *Member) publishRan(ctx context.Context) {
	var fresh []shape
	f.mu.Lock()
	for b, sq := range f.eng.WarmedShapes() {
		s := shape{b, sq}
		if !f.tried[s] {
			fresh = append(fresh, s)
		}
	}
	f.mu.Unlock()
	for _, s := range fresh {
		created, err := publishShape(ctx, f.kv, f.cfg, s)
		if err != nil {
			if ctx.Err() == nil {
				f.stats.errors.Add(1)
				f.cfg.Logger.Warn("fleet: publishing a shape", "err", err)
			}
			continue // try again next tick
		}
		if created {
			f.stats.published.Add(1)
		}
		k := f.cfg.key(s.batch, s.seq)
		f.mu.Lock()
		f.tried[s] = true
		wanted := f.wanted[s]
		f.mu.Unlock()
		if wanted {
			f.dropWant(ctx, k)
		}
	}
}

// dropWant deletes the want of a shape the bucket now has.
func (f *Member) dropWant(ctx context.Context, k ShapeKey) {
	if err := f.kv.Delete(ctx, k.Want(), 0); err != nil && ctx.Err() == nil {
		f.cfg.Logger.Warn("fleet: dropping a satisfied want", "key", k.Want(), "err", err)
	}
}

// compileWanted compiles the longest wanted shape that nobody has built or
// is building, within the hourly cap. It reports whether it ran the engine.
func (f *Member) compileWanted(ctx context.Context) bool {
	f.mu.Lock()
	hour := time.Now().Add(-time.Hour)
	var pick *shape
	for s := range f.wanted {
		if _, done := f.shapes[s]; done || f.locked[s] || f.failed[s].After(hour) {
			continue
		}
		if pick == nil || s.seq > pick.seq || s.seq == pick.seq && s.batch > pick.batch {
			pick = &s
		}
	}
	f.compiles = slices.DeleteFunc(f.compiles, func(t time.Time) bool { return t.Before(hour) })
	capped := len(f.compiles) >= f.cfg.CompilesPerHour
	f.mu.Unlock()
	if pick == nil {
		return false
	}
	if capped {
		f.cfg.Logger.Debug("fleet: hourly compile cap reached", "cap", f.cfg.CompilesPerHour, "wanted", pick.String())
		return false
	}
	built := f.stats.compiles.Load()
	err := f.compileLocked(ctx, *pick)
	if errors.Is(err, errLockBusy) {
		return false // the holder's shape key will come; then it is pre-warmed
	}
	// A failed build took the sessions as long as a good one; a shape
	// found built meanwhile took nothing. Only the worker compiles wanted
	// shapes, so the cap needs no lock across the compile.
	if err != nil || f.stats.compiles.Load() > built {
		f.mu.Lock()
		f.compiles = append(f.compiles, time.Now())
		f.mu.Unlock()
	}
	if err != nil && ctx.Err() == nil {
		// This member may be unable to build it (a peer with a larger
		// token limit wanted it): leave it to others for an hour rather
		// than spend the cap on it again.
		f.mu.Lock()
		f.failed[*pick] = time.Now()
		f.mu.Unlock()
		f.stats.errors.Add(1)
		f.cfg.Logger.Warn("fleet: compiling a wanted shape", "shape", pick.String(), "err", err)
	}
	return true
}

// Compile makes sure the fleet has the shape and this engine has warmed
// it: it pre-warms it if a peer built it, builds it under the compile lock
// if nobody did, and waits for the holder's shape key (or for the lock to
// expire) while a peer builds it. Use it for shapes worth building ahead of
// traffic (adaptive warm-up).
func (f *Member) Compile(ctx context.Context, batch, seq int) error {
	if err := f.eng.ShapeAdmissible(batch, seq); err != nil {
		return fmt.Errorf("fleet: compile %dx%d: %w", batch, seq, err)
	}
	s := shape{batch, seq}
	for {
		changed := f.changes()
		f.mu.Lock()
		_, built := f.shapes[s]
		locked := f.locked[s]
		f.mu.Unlock()
		switch {
		case built:
			return f.prewarmOne(ctx, s)
		case !locked:
			err := f.compileLocked(ctx, s)
			if !errors.Is(err, errLockBusy) {
				return err
			}
		}
		f.cfg.Logger.Info("fleet: waiting for a peer's compile", "shape", s.String())
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-f.done:
			return ErrStopped // nothing updates the state any more
		}
	}
}

// compileLocked takes the shape's compile lock, builds it (a warm-up run
// on every session), publishes its shape key, drops the want and releases
// the lock. It returns errLockBusy when a peer holds the lock.
func (f *Member) compileLocked(ctx context.Context, s shape) error {
	k := f.cfg.key(s.batch, s.seq)
	lock := encodeRecord(LockRecord{By: f.cfg.Member, At: time.Now().UTC()})
	rev, err := f.kv.Create(ctx, k.Lock(), lock, f.cfg.LockTTL)
	if errors.Is(err, ErrExists) {
		f.stats.lockBusy.Add(1)
		return errLockBusy
	}
	if err != nil {
		return fmt.Errorf("fleet: lock %s: %w", k.Lock(), err)
	}
	// A holder that finished between our look at the state and the create
	// has already published the shape: load it instead of building again.
	if _, err := f.kv.Get(ctx, k.String()); err == nil {
		f.release(k.Lock(), rev)
		f.dropWant(ctx, k)
		return f.prewarmOne(ctx, s)
	}

	refreshCtx, stopRefresh := context.WithCancel(ctx)
	refreshed := make(chan uint64, 1)
	go func() { refreshed <- f.holdLock(refreshCtx, k.Lock(), lock, rev) }()
	before := cacheFiles(f.cfg.EngineCacheDir)
	start := time.Now()
	f.cfg.Logger.Info("fleet: compiling", "shape", s.String(), "lock", k.Lock())
	err = f.eng.WarmShape(ctx, s.batch, s.seq)
	took := time.Since(start)
	stopRefresh()
	rev = <-refreshed
	if err != nil {
		f.release(k.Lock(), rev)
		return fmt.Errorf("fleet: compile %v: %w", s, err)
	}
	rec := ShapeRecord{
		By: f.cfg.Member, At: time.Now().UTC(), Via: ViaLock, CompileMS: took.Milliseconds(),
		Files: newFiles(before, cacheFiles(f.cfg.EngineCacheDir)),
	}
	if _, err := f.kv.Put(ctx, k.String(), encodeRecord(rec)); err != nil {
		f.release(k.Lock(), rev)
		return fmt.Errorf("fleet: publish %s: %w", k.String(), err)
	}
	f.mu.Lock()
	f.tried[s] = true
	f.mu.Unlock()
	f.release(k.Lock(), rev)
	f.dropWant(ctx, k)
	f.stats.compiles.Add(1)
	f.cfg.Logger.Info("fleet: compiled", "shape", s.String(), "took", took, "files", len(rec.Files))
	return nil
}

// holdLock renews the lock's TTL every third of it until ctx ends, and
// returns the lock's last revision. A renewal is a put of the same value
// with a fresh TTL, made only if the lock is still the revision we wrote:
// a holder that lost its lock (it expired while the process stalled)
// must not take it back from the peer that holds it now.
func (f *Member) holdLock(ctx context.Context, key string, value []byte, rev uint64) uint64 {
	t := time.NewTicker(f.cfg.LockTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return rev
		case <-t.C:
		}
		next, err := f.kv.Update(ctx, key, value, rev, f.cfg.LockTTL)
		if err != nil {
			if ctx.Err() == nil {
				f.cfg.Logger.Warn("fleet: renewing the compile lock failed; a peer may build the same shape", "lock", key, "err", err)
			}
			return rev
		}
		rev = next
	}
}

// release deletes the lock if it is still ours. It uses a fresh context:
// a compile cancelled by Stop must still free the lock for the peers.
func (f *Member) release(key string, rev uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.kv.Delete(ctx, key, rev); err != nil {
		f.cfg.Logger.Warn("fleet: releasing a key; it expires by its ttl", "key", key, "err", err)
	}
}

// cacheFiles lists the regular files under dir (relative paths) with
// their modification times; nil when dir is empty or unreadable.
func cacheFiles(dir string) map[string]time.Time {
	if dir == "" {
		return nil
	}
	out := map[string]time.Time{}
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil // an unreadable entry only shortens the list
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if rel, err := filepath.Rel(dir, path); err == nil {
			out[rel] = info.ModTime()
		}
		return nil
	})
	return out
}

// newFiles lists the files of after that are not in before or changed
// since, sorted.
func newFiles(before, after map[string]time.Time) []string {
	var out []string
	for name, mod := range after {
		if was, ok := before[name]; !ok || !was.Equal(mod) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}
