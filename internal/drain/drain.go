// Package drain measures how fast a budget of tokens drains: the one rate
// meter of the gateway's admission window and the job loop's interactive
// queue, which tell a caller when there will be room ("retry in about
// ...") and refuse what could not start before its deadline. It imports
// nothing of the project.
package drain

import (
	"math"
	"time"
)

// Window is the busy time of one rate sample.
const Window = 500 * time.Millisecond

// maxWait bounds what [Meter.Wait] answers: an hour.
const maxWait = time.Hour

// staleAfter is how long a rate stays trusted without a new sample.
const staleAfter = time.Minute

// Meter measures how fast held tokens are released, counting only the
// time some were held: an idle spell does not make the rate look slow.
// The zero value is ready; it is not safe for concurrent use (its owner
// holds its lock around it).
type Meter struct {
	last    time.Time
	busy    time.Duration
	drained int
	rate    float64 // tokens a second, 0 until measured
	sampled time.Time
}

// Tick accounts the time since the last tick, busy when tokens were held
// (wasBusy), and drained tokens released now.
func (m *Meter) Tick(now time.Time, wasBusy bool, drained int) {
	if wasBusy && !m.last.IsZero() && now.After(m.last) {
		m.busy += now.Sub(m.last)
	}
	m.last = now
	m.drained += drained
	if m.busy >= Window {
		sample := float64(m.drained) / m.busy.Seconds()
		if m.rate == 0 {
			m.rate = sample
		} else {
			m.rate = 0.7*m.rate + 0.3*sample
		}
		m.busy, m.drained, m.sampled = 0, 0, now
	}
}

// Rate is the measured rate in tokens a second; 0 before anything was
// measured.
func (m *Meter) Rate() float64 { return m.rate }

// Wait is how long excess tokens take to drain at the measured rate (at
// most an hour); ok is false before anything was measured. A rate not
// refreshed for a minute (a quiet spell) is not trusted.
func (m *Meter) Wait(excess int, now time.Time) (time.Duration, bool) {
	rate := m.rate
	if rate > 0 && now.Sub(m.sampled) > staleAfter && m.busy < Window/5 {
		rate = 0
	}
	if rate == 0 && m.busy >= Window/5 && m.drained > 0 {
		rate = float64(m.drained) / m.busy.Seconds()
	}
	if rate <= 0 {
		return 0, false
	}
	return time.Duration(math.Min(float64(max(excess, 0))/rate, maxWait.Seconds()) * float64(time.Second)), true
}
