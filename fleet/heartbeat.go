package fleet

import (
	"context"
	"errors"
	"time"
)

// Membership: a member keeps a member.<name> key ([MemberRecord]) with a
// per-key TTL and rewrites it every third of the TTL, so that `jetembed
// fleet` (and [Read]) tells live members from the names on records of
// members that are gone: a member that dies stops renewing and its key
// expires; one that leaves deletes it.

// beat writes the member's heartbeat: a renewal at the revision it last
// wrote, or a create when it has none (or lost it: the key expired while
// the process stalled, or a namesake wrote it). It returns the revision
// to renew next time, 0 when the write failed.
func (f *Member) beat(ctx context.Context, rev uint64) uint64 {
	rec := encodeRecord(f.memberRecord())
	key := MemberKey(f.cfg.Member)
	if rev > 0 {
		next, err := f.kv.Update(ctx, key, rec, rev, f.cfg.MemberTTL)
		if err == nil {
			return next
		}
		if !errors.Is(err, ErrRevision) {
			f.beatFailed(ctx, key, err)
			return rev // try the same revision again
		}
	}
	next, err := f.kv.Create(ctx, key, rec, f.cfg.MemberTTL)
	if errors.Is(err, ErrExists) {
		// A live key of the same name that is not ours: take it over.
		if e, gerr := f.kv.Get(ctx, key); gerr == nil {
			next, err = f.kv.Update(ctx, key, rec, e.Revision, f.cfg.MemberTTL)
		}
	}
	if err != nil {
		f.beatFailed(ctx, key, err)
		return 0
	}
	return next
}

func (f *Member) beatFailed(ctx context.Context, key string, err error) {
	if ctx.Err() == nil {
		f.stats.errors.Add(1)
		f.cfg.Logger.Warn("fleet: heartbeat failed; peers may take this member for gone", "key", key, "err", err)
	}
}

// memberRecord is this member's heartbeat value: its engine's coverage now.
func (f *Member) memberRecord() MemberRecord {
	rec := MemberRecord{Name: f.cfg.Member, Model: f.cfg.Model, SM: f.cfg.smToken(), Started: f.started, At: time.Now().UTC()}
	for _, seq := range f.eng.WarmedShapes() {
		rec.Shapes++
		rec.Ceiling = max(rec.Ceiling, seq)
	}
	return rec
}

// heartbeat renews the member key every third of its TTL until ctx ends,
// then deletes it (with a fresh context: a stopping member still says it
// left).
func (f *Member) heartbeat(ctx context.Context, rev uint64) {
	t := time.NewTicker(f.cfg.MemberTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if rev > 0 {
				f.release(MemberKey(f.cfg.Member), rev)
			}
			return
		case <-t.C:
		}
		rev = f.beat(ctx, rev)
	}
}
