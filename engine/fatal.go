package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// ErrFatal marks a run error after which the process cannot serve: a
// TensorRT engine build that failed in a way that leaves the CUDA state
// unrecoverable. Reloading the session would come back to the same broken
// state, so the engine does not count it toward the circuit breaker's
// verdict; [Engine.Fatal] tells the process to give its jobs back and exit
// so that the orchestrator replaces it.
var ErrFatal = errors.New("engine: fatal engine-build error")

// fatalMessages are the TensorRT execution provider's messages for an
// engine build that leaves the process unusable.
var fatalMessages = []string{
	"failed to build engine",
	"failed to create engine from network",
}

// IsFatal reports whether err, or any error in its chain (wrapped or
// joined), is [ErrFatal] or carries one of TensorRT's fatal engine-build
// messages.
func IsFatal(err error) bool {
	return errors.Is(err, ErrFatal) || fatalText(err) != ""
}

// fatalText is the text of the first error in err's chain that carries a
// fatal engine-build message, or "". Each error of the chain is read by
// hand: a wrapper's text need not include its cause's.
func fatalText(err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	for _, m := range fatalMessages {
		if strings.Contains(strings.ToLower(msg), m) {
			return msg
		}
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return fatalText(u.Unwrap())
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if t := fatalText(e); t != "" {
				return t
			}
		}
	}
	return ""
}

// fatalState records the first fatal run error of an engine.
type fatalState struct {
	once sync.Once
	done chan struct{}
	err  error
}

func (f *fatalState) init() { f.done = make(chan struct{}) }

func (f *fatalState) set(err error) {
	f.once.Do(func() {
		// The cause's text is kept where a wrapper's hides it.
		if t := fatalText(err); t != "" && !strings.Contains(err.Error(), t) {
			err = fmt.Errorf("%w (%s)", err, t)
		}
		f.err = err
		close(f.done)
	})
}

// watch wraps factory's runners so that a fatal run error marks the
// engine fatal and comes back as an [ErrFatal].
func (f *fatalState) watch(factory RunnerFactory) RunnerFactory {
	return func(session int) (Runner, error) {
		r, err := factory(session)
		if err != nil {
			if IsFatal(err) {
				f.set(err)
				return nil, fmt.Errorf("%w: %w", ErrFatal, err)
			}
			return nil, err
		}
		return fatalRunner{r: r, f: f}, nil
	}
}

type fatalRunner struct {
	r Runner
	f *fatalState
}

func (r fatalRunner) Run(ctx context.Context, in RunInput) (RunOutput, error) {
	out, err := r.r.Run(ctx, in)
	if err != nil && IsFatal(err) {
		r.f.set(err)
		if !errors.Is(err, ErrFatal) {
			err = fmt.Errorf("%w: %w", ErrFatal, err)
		}
	}
	return out, err
}

func (r fatalRunner) Close() error { return r.r.Close() }

// Fatal is closed when a session met a fatal engine-build error (see
// [ErrFatal]); [Engine.FatalErr] then says which.
func (e *Engine) Fatal() <-chan struct{} { return e.fatal.done }

// FatalErr is the first fatal run error, or nil.
func (e *Engine) FatalErr() error {
	select {
	case <-e.fatal.done:
		return e.fatal.err
	default:
		return nil
	}
}
