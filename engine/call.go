package engine

import "time"

// Class is the scheduling class of an Embed call. Interactive calls are
// admitted before bulk ones, under their own budget
// ([Config.InteractiveTokens]), and their chunks run first; bulk chunks
// are capped by the chunk latency budget so an interactive text waits at
// most about one chunk, and age ahead of interactive work when they made
// no progress for [Config.Aging].
type Class uint8

// The classes, bulk the zero value.
const (
	Bulk Class = iota
	Interactive
	nClasses
)

func (c Class) String() string {
	if c == Interactive {
		return "interactive"
	}
	return "bulk"
}

// The scheduler's own short names.
type class = Class

const (
	bulk        = Bulk
	interactive = Interactive
)

// Call is how one [Engine.Embed] call is admitted: its class, whose it
// is, how long it may wait for room and how large a result it may return.
// Every field is explicit; the context only cancels.
//
// A call whose class's budget is full waits in the engine's one queue:
// tenants by deficit round robin over tokens (their [Config.TenantWeights]),
// each tenant's calls in arrival order, interactive before bulk. It waits
// until it is admitted, its Deadline or MaxWait passes, its context ends,
// or the interactive queue's bound refuses it (overloaded).
type Call struct {
	// Class is Bulk (the zero value) or Interactive.
	Class Class
	// Tenant is whose call it is, for fair share ("" is a tenant too).
	Tenant string
	// Deadline, when set, is the caller's deadline: a call still waiting
	// for room then fails deadline_exceeded, and one the measured drain
	// rate says could not start before it is refused overloaded at once.
	Deadline time.Time
	// MaxWait, when positive, bounds the wait for room (before Deadline):
	// past it the call fails overloaded, retriable.
	MaxWait time.Duration
	// OutputLimit, when positive, refuses with result_too_large a call
	// whose vectors would take more bytes ([Engine.OutputBytes]): decided
	// from the token counts right after tokenizing, before the call waits
	// or runs.
	OutputLimit int64
	// Copies, when set (one count per text), is how many times each text's
	// vectors appear in the caller's result, for a caller that runs each
	// distinct text once: OutputLimit counts every copy (0 counts as 1).
	Copies []int
	// Hold, when positive on a call with no texts, is admitted like any
	// call of that many tokens (same queue, same budget, handed to
	// Admitted) and runs nothing: Embed returns no embeddings once it is
	// admitted. A caller that answers texts another call computes (the job
	// loop's compute-once) holds budget for their results this way, so
	// that its fetching stays bounded by the one budget without waiting
	// for the other call to finish.
	Hold int
	// NoWait refuses the call overloaded at once instead of waiting when
	// its class's budget is full (a caller that would rather retry
	// elsewhere).
	NoWait bool
	// Admitted, when set, is called once when the call is admitted (it
	// holds budget and its texts are queued to run), from the calling
	// goroutine; not called when the call fails before. It is handed the
	// call's budget: the tokens stay taken after Embed returns, until the
	// caller calls release (once; later calls do nothing). The job loop
	// stops fetching until its bulk job is admitted, and holds the budget
	// until the job is settled (its result is in memory until then). An
	// Embedder that wraps another passes Call on unchanged; one that
	// never calls Admitted makes the job loop take one bulk job at a time.
	Admitted func(release func())
}

// limit is when the call stops waiting for room (zero: never).
func (c Call) limit(now time.Time) time.Time {
	var lim time.Time
	if c.MaxWait > 0 {
		lim = now.Add(c.MaxWait)
	}
	if !c.Deadline.IsZero() && (lim.IsZero() || c.Deadline.Before(lim)) {
		lim = c.Deadline
	}
	return lim
}
