package node

import (
	"context"
	"errors"
	"log/slog"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/fleet"
)

// probeShare is where the cost coefficients of a member's hardware are
// shared: the engines bucket, the member (its SM and name) and the
// hardware (ort.Provider.Hardware).
type probeShare struct {
	log    *slog.Logger
	kv     fleet.Store
	member fleet.Config
	arch   string
}

// share installs the cost coefficients a peer stored for e's model and
// this SM and hardware, or probes e and stores its own: a fleet of
// identical hosts probes once.
func (p probeShare) share(ctx context.Context, e *engine.Engine) error {
	log, kv, sm, arch, member := p.log, p.kv, p.member.SM, p.arch, p.member.Member
	rec, err := fleet.LoadProbe(ctx, kv, e.ModelID(), sm, arch)
	if err == nil {
		if err := e.UseCost(rec.A, rec.Bq); err == nil {
			log.Info("fleet: cost model from a peer's probe", "by", rec.By, "a", rec.A, "bq", rec.Bq, "arch", arch)
			return nil
		}
	} else if !errors.Is(err, fleet.ErrNoProbe) {
		log.Warn("fleet: reading shared probe coefficients", "err", err)
	}
	a, bq, err := e.Probe(ctx)
	if err != nil {
		return err
	}
	if a == 0 && bq == 0 {
		return nil // too few probe shapes fit: scheduling by tokens
	}
	if err := fleet.StoreProbe(ctx, kv, e.ModelID(), sm, arch, member, a, bq); err != nil {
		log.Warn("fleet: sharing probe coefficients", "err", err)
	}
	log.Info("fleet: probed the cost model", "a", a, "bq", bq, "arch", arch)
	return nil
}
