package engine

import (
	"time"

	"github.com/jetembed/jetembed/engine/internal/pack"
)

// Stats is a snapshot of the engine for metrics.
type Stats struct {
	Sessions []SessionStats
	// Warmed lists the warmed shapes when the coverage is a [ShapeSet].
	Warmed  []Shape
	Ceiling int
	// AdmittedTokens are the real tokens of the Embed calls in progress
	// (both classes); AdmissionBudget is the bulk class's budget
	// ([Config.AdmissionTokens]) and InteractiveBudget the interactive
	// class's ([Config.InteractiveTokens]): what the engine admits.
	AdmittedTokens, AdmissionBudget, InteractiveBudget int
	// Waiting counts the Embed calls waiting for room in the admission
	// queue (both classes).
	Waiting int
	// Queued counts texts waiting in the scheduler, QueuedInteractive
	// those of them in the interactive class.
	Queued, QueuedInteractive int
	Cost                      Cost
}

// SessionStats describes one session. Loaded false means its breaker is
// open: it was dropped and is reloading.
type SessionStats struct {
	Index                 int
	Loaded                bool
	Busy                  time.Duration
	Runs, Errors, Reloads int64
	ConsecutiveErrors     int64
	// QueuedLoad is the modelled nanoseconds of the chunk running now.
	QueuedLoad int64
	LoadError  error
}

// Stats returns a snapshot; it is cheap and safe to call concurrently.
func (e *Engine) Stats() Stats {
	a, bq := e.CostModel()
	e.sched.mu.Lock()
	queued, queuedI := len(e.sched.queue[bulk])+len(e.sched.queue[interactive]), len(e.sched.queue[interactive])
	e.sched.mu.Unlock()
	bulkBudget, interactiveBudget := e.adm.budgets()
	st := Stats{
		AdmissionBudget:   bulkBudget,
		InteractiveBudget: interactiveBudget,
		Ceiling:           e.cfg.Coverage.Ceiling(),
		AdmittedTokens:    e.adm.inUse(),
		Waiting:           e.adm.waiting(),
		Queued:            queued,
		QueuedInteractive: queuedI,
		Cost:              pack.Cost{A: a, Bq: bq},
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
