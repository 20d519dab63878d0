package engine

import (
	"time"

	"github.com/jetembed/jetembed/engine/pack"
)

// Stats is a snapshot of the engine for metrics.
type Stats struct {
	Sessions []SessionStats
	// Warmed lists the warmed shapes when the coverage is a [ShapeSet].
	Warmed  []Shape
	Ceiling int
	// InflightTokens are admitted real tokens of Embed calls in progress.
	InflightTokens, InflightBudget int
	Cost                           pack.Cost
}

// SessionStats describes one session. Loaded false means its breaker is
// open: it was dropped and is reloading.
type SessionStats struct {
	Index                 int
	Loaded                bool
	Busy                  time.Duration
	Runs, Errors, Reloads int64
	ConsecutiveErrors     int64
	QueuedLoad            int64
	LoadError             error
}

// Stats returns a snapshot; it is cheap and safe to call concurrently.
func (e *Engine) Stats() Stats {
	st := Stats{
		Ceiling:        e.cfg.Coverage.Ceiling(),
		InflightTokens: e.adm.inUse(),
		InflightBudget: e.cfg.InflightTokens,
		Cost:           e.cfg.Cost,
	}
	if ss, ok := e.cfg.Coverage.(*ShapeSet); ok {
		st.Warmed = ss.Shapes()
	}
	for _, s := range e.pool.sessions {
		ss := SessionStats{
			Index:             s.idx,
			Loaded:            s.loaded.Load(),
			Busy:              time.Duration(s.busy.Load()),
			Runs:              s.runs.Load(),
			Errors:            s.errs.Load(),
			Reloads:           s.reloads.Load(),
			ConsecutiveErrors: s.consecutive.Load(),
			QueuedLoad:        s.load.Load(),
		}
		if p := s.loadErr.Load(); p != nil {
			ss.LoadError = *p
		}
		st.Sessions = append(st.Sessions, ss)
	}
	return st
}
