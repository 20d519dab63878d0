package engine

import (
	"context"
	"strconv"
	"time"
)

// Metrics hears the facts only the engine knows; jetembed's telemetry
// (what jetstream.NewMetrics returns, serve's /metrics) implements it. Set it with [Engine.SetMetrics]. Calls come from the
// caller's goroutine (Tokenize) or from session goroutines (Run,
// GuardRefusal), so an implementation must be safe for concurrent use.
type Metrics interface {
	// Tokenize records the tokenization of one Embed call's texts.
	Tokenize(ctx context.Context, d time.Duration)
	// Run records one session run (warm-up included) under the session's
	// index, and adds it to that session's busy time.
	Run(ctx context.Context, session string, d time.Duration)
	// GuardRefusal counts one chunk the JIT guard refused before any run.
	GuardRefusal(ctx context.Context)
}

// SetMetrics makes the engine record into m from now on; nil stops it.
func (e *Engine) SetMetrics(m Metrics) {
	if m == nil {
		e.pool.metrics.Store(nil)
		return
	}
	e.pool.metrics.Store(&m)
}

// sessionLabel is the session label of metrics: its index, as the
// breaker's jetembed_breaker_open{session} has it.
func sessionLabel(i int) string { return strconv.Itoa(i) }
