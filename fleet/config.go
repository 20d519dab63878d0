package fleet

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"os"
	"time"
)

// Engine is what the fleet needs of the local engine; *engine.Engine
// satisfies it (engine/fleet_hooks.go).
type Engine interface {
	// WarmShape runs the shape on every session, between runs, and raises
	// the engine's coverage. On TensorRT it loads the plan from the shared
	// engine cache, or builds it.
	WarmShape(ctx context.Context, batch, seq int) error
	// ShapeWarmed reports whether the engine has the exact shape.
	ShapeWarmed(batch, seq int) bool
	// WarmedShapes yields the shapes the engine has run.
	WarmedShapes() iter.Seq2[int, int]
	// Activity reports whether work is in flight and how many runs the
	// sessions made so far.
	Activity() (busy bool, runs int64)
	// ShapeAdmissible says why the engine would never run a batch x seq
	// chunk, or nil: every shape read from the bucket passes it before the
	// fleet keeps or warms it.
	ShapeAdmissible(batch, seq int) error
}

// ErrConfig reports an unusable [Config].
var ErrConfig = errors.New("fleet: invalid config")

// Defaults of [Config].
const (
	DefaultLockTTL         = time.Minute
	DefaultWantTTL         = time.Hour
	DefaultMemberTTL       = 30 * time.Second
	DefaultIdleQuiet       = 10 * time.Second
	DefaultTick            = time.Second
	DefaultCompilesPerHour = 12
)

// Config says which model and SM a member of the fleet serves and how
// it cooperates.
type Config struct {
	// Model is the engine's model id ("name@sha12"); SM is "cpu" or the
	// GPU compute capability ("8.9"). Only shapes of this model and SM are
	// pre-warmed: plans do not move between SMs.
	Model, SM string
	// Member names this process in the records it writes; default
	// "<hostname>/<pid>".
	Member string
	// EngineCacheDir is the TensorRT engine cache directory; the files a
	// compile adds there are listed in its [ShapeRecord]. Empty on CPU.
	EngineCacheDir string
	// LockTTL is the per-key TTL of a compile lock: a holder that dies
	// frees it after this long. A live holder refreshes it every third of
	// it while it compiles. At least one second (the server's TTL unit).
	LockTTL time.Duration
	// WantTTL is how long a want key lives if nobody compiles its shape.
	WantTTL time.Duration
	// MemberTTL is the per-key TTL of the member's heartbeat key, renewed
	// every third of it: a member that dies is shown gone after this long.
	MemberTTL time.Duration
	// IdleQuiet is how long the engine must have been idle (no call in
	// flight, no run made, Busy false) before this member compiles wanted
	// shapes.
	IdleQuiet time.Duration
	// CompilesPerHour caps the wanted shapes this member compiles in any
	// hour: a compile takes a GPU away from serving for minutes.
	CompilesPerHour int
	// Tick is how often the member checks for idleness and publishes the
	// shapes its engine ran; default one second.
	Tick time.Duration
	// MinSeq is the shortest peer shape this member pre-warms, and the
	// shortest refused shape it asks the fleet for; 0 means every shape.
	// Shapes its own engine ran are published whatever their length, so
	// the bucket shows the whole fleet's coverage. On CPU, where a run
	// needs no warming and only the JIT guard's ceiling matters, set it to
	// the guard seq: pre-warming every peer's short shapes would only
	// repeat their runs.
	MinSeq int
	// Busy, when set, says whether work waits outside the engine (the
	// jobs consumer's pending count): an idle engine with a backlog is
	// about to be busy, not idle.
	Busy func() bool
	// Logger gets one line per compile, pre-warm and lock wait; default
	// slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns c with every unset field filled in.
func (c Config) WithDefaults() Config {
	if c.SM == "" {
		c.SM = "cpu"
	}
	if c.Member == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "unknown"
		}
		c.Member = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	if c.LockTTL == 0 {
		c.LockTTL = DefaultLockTTL
	}
	if c.WantTTL == 0 {
		c.WantTTL = DefaultWantTTL
	}
	if c.MemberTTL == 0 {
		c.MemberTTL = DefaultMemberTTL
	}
	if c.IdleQuiet == 0 {
		c.IdleQuiet = DefaultIdleQuiet
	}
	if c.CompilesPerHour == 0 {
		c.CompilesPerHour = DefaultCompilesPerHour
	}
	if c.Tick == 0 {
		c.Tick = DefaultTick
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Model == "":
		return fmt.Errorf("%w: no model id", ErrConfig)
	case c.LockTTL < time.Second:
		return fmt.Errorf("%w: lock ttl %v below the server's 1s resolution", ErrConfig, c.LockTTL)
	case c.WantTTL < time.Second:
		return fmt.Errorf("%w: want ttl %v below 1s", ErrConfig, c.WantTTL)
	case c.MemberTTL < time.Second:
		return fmt.Errorf("%w: member ttl %v below 1s", ErrConfig, c.MemberTTL)
	case c.IdleQuiet < 0 || c.Tick < 0:
		return fmt.Errorf("%w: negative idle quiet %v or tick %v", ErrConfig, c.IdleQuiet, c.Tick)
	case c.CompilesPerHour < 0:
		return fmt.Errorf("%w: compiles per hour %d < 0 (0 means the default)", ErrConfig, c.CompilesPerHour)
	case c.MinSeq < 0:
		return fmt.Errorf("%w: min seq %d < 0", ErrConfig, c.MinSeq)
	}
	return nil
}

// modelToken and smToken are the config's model and SM as key tokens.
func (c Config) modelToken() string { return KeyToken(c.Model) }
func (c Config) smToken() string    { return SMToken(c.SM) }

func (c Config) key(batch, seq int) ShapeKey {
	return ShapeKey{Model: c.modelToken(), SM: c.smToken(), Batch: batch, Seq: seq}
}
