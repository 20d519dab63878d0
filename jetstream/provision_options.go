package jetstream

// Mode says what [Provision] may change on the server.
type Mode int

// The modes of [Provision].
const (
	// ModeApply creates what is missing and updates drift in place:
	// `jetembed provision`, the one owner of server-side configuration.
	ModeApply Mode = iota
	// ModeCreate creates what is missing and updates nothing: drift is
	// reported (Drifted), never applied. `serve --provision=create`.
	ModeCreate
	// ModeCheck creates and updates nothing: it reports what is missing
	// (Missing, and an error wrapping [ErrMissing]) and what drifted.
	// `serve --provision=off`.
	ModeCheck
)

// ProvisionOption tunes [Provision].
type ProvisionOption func(*provisionOptions)

type provisionOptions struct {
	mode           Mode
	allowDowngrade bool
	dryRun         bool
	serverTuning   bool
}

// WithMode sets what [Provision] may change; the default is [ModeApply].
func WithMode(m Mode) ProvisionOption { return func(o *provisionOptions) { o.mode = m } }

// AllowDowngrade lets [ModeApply] lower a stream's or the bucket's replicas
// and remove subjects from a stream; without it such drift is refused
// ([ErrDowngrade]).
func AllowDowngrade() ProvisionOption { return func(o *provisionOptions) { o.allowDowngrade = true } }

// DryRun makes [Provision] report what it would create and update without
// changing anything.
func DryRun() ProvisionOption { return func(o *provisionOptions) { o.dryRun = true } }

// ServerTuning leaves the consumer's AckWait, MaxDeliver, BackOff and
// MaxAckPending out of the drift check: the caller takes them from the
// server (serve) instead of wanting values of its own.
func ServerTuning() ProvisionOption { return func(o *provisionOptions) { o.serverTuning = true } }
