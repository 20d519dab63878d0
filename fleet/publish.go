package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// publishShape records a shape the engine ran in the bucket with a create
// (the first record of a shape stays); created is false when a record was
// there already.
func publishShape(ctx context.Context, kv Store, cfg Config, s shape) (created bool, err error) {
	k := cfg.key(s.batch, s.seq)
	rec := ShapeRecord{By: cfg.Member, At: time.Now().UTC(), Via: ViaRun}
	_, err = kv.Create(ctx, k.String(), encodeRecord(rec), 0)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrExists):
		return false, nil
	}
	return false, fmt.Errorf("fleet: publishing %s: %w", k.String(), err)
}

// Publish records every shape eng has warmed in the bucket, as a member
// does for the shapes its engine ran, and drops the wants they satisfy. It
// is the one-shot form for a process that warms and exits (`jetembed
// warmup`, the init container): the members that join later pre-warm the
// shapes from the shared engine cache instead of compiling them. It
// returns how many shape records it created.
func Publish(ctx context.Context, kv Store, eng Engine, cfg Config) (int, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return 0, err
	}
	n := 0
	for b, sq := range eng.WarmedShapes() {
		s := shape{b, sq}
		if eng.ShapeAdmissible(b, sq) != nil {
			continue
		}
		created, err := publishShape(ctx, kv, cfg, s)
		if err != nil {
			return n, err
		}
		if created {
			n++
		}
		want := cfg.key(b, sq).Want()
		if _, err := kv.Get(ctx, want); err == nil {
			if err := kv.Delete(ctx, want, 0); err != nil {
				cfg.Logger.Warn("fleet: dropping a satisfied want", "key", want, "err", err)
			}
		}
	}
	return n, nil
}
