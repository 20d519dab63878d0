package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrNoProbe means the engines bucket holds no cost coefficients for the
// model, SM and arch asked for: this process must run the probe itself.
var ErrNoProbe = errors.New("no probe coefficients in the bucket")

// LoadProbe reads the packing cost coefficients a peer measured for the
// same model, SM and host architecture, so this process can skip the
// start-up probe. It returns [ErrNoProbe] when there are none.
func LoadProbe(ctx context.Context, kv Store, model, sm, arch string) (ProbeRecord, error) {
	key := ProbeKey(model, sm, arch)
	e, err := kv.Get(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return ProbeRecord{}, fmt.Errorf("%w: %s", ErrNoProbe, key)
	}
	if err != nil {
		return ProbeRecord{}, fmt.Errorf("probe: %s: %w", key, err)
	}
	rec, err := DecodeProbeRecord(e.Value)
	if err != nil {
		// The value is a stranger's: it is not printed.
		return ProbeRecord{}, fmt.Errorf("%w: %s holds an unusable value: %w", ErrNoProbe, key, err)
	}
	return rec, nil
}

// StoreProbe shares the cost coefficients this process measured (a*B*S +
// bq*B*S^2 seconds) with the peers of the same model, SM and arch. The
// first record stays: peers that probed at the same time all measured the
// same hardware, and a stable value keeps the fleet's packing alike.
func StoreProbe(ctx context.Context, kv Store, model, sm, arch, member string, a, bq float64) error {
	if !costCoefficient(a) || !costCoefficient(bq) || a == 0 && bq == 0 {
		return fmt.Errorf("probe: coefficients a=%g bq=%g are not a cost model", a, bq)
	}
	key := ProbeKey(model, sm, arch)
	rec := ProbeRecord{A: a, Bq: bq, By: member, At: time.Now().UTC()}
	if _, err := kv.Create(ctx, key, encodeRecord(rec), 0); err != nil && !errors.Is(err, ErrExists) {
		return fmt.Errorf("probe: %s: %w", key, err)
	}
	return nil
}
