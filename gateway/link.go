package gateway

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"
)

// ErrFleetUnreachable is the cause of the calls that end because the
// gateway's connection to the fleet dropped: they are answered 503
// fleet_unreachable with Retry-After at once, not at their timeout, and
// so is every call while the connection is down.
var ErrFleetUnreachable = errors.New("the gateway's connection to the fleet is down")

// link is the state of the connection to the fleet, as the owner of the
// connection reports it through [Server.SetConnected]. Each spell of being
// up has a context that the next drop cancels, ending the calls made in it.
type link struct {
	mu     sync.Mutex
	down   bool
	since  time.Time
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func newLink() *link {
	l := &link{}
	l.ctx, l.cancel = context.WithCancelCause(context.Background())
	return l
}

// SetConnected tells the gateway whether its connection to the fleet is
// up. When it drops, the calls in flight end with [ErrFleetUnreachable]
// and new ones are answered 503 until it is up again. It is safe to call
// from any goroutine, repeatedly with the same value.
func (s *Server) SetConnected(up bool) {
	l := s.link
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case up && l.down:
		l.down = false
		l.ctx, l.cancel = context.WithCancelCause(context.Background())
		s.cfg.Logger.Info("gateway: fleet connection up again: taking calls", "down_for", time.Since(l.since).Round(time.Millisecond))
	case !up && !l.down:
		l.down, l.since = true, time.Now()
		l.cancel(ErrFleetUnreachable)
		s.cfg.Logger.Warn("gateway: fleet connection down: calls in flight end, new ones are answered 503 until it is back")
	}
}

// linkDown reports whether the connection to the fleet is down now.
func (s *Server) linkDown() bool {
	s.link.mu.Lock()
	defer s.link.mu.Unlock()
	return s.link.down
}

// linked returns ctx ended also by the next drop of the connection, or
// the 503 to answer when it is down now.
func (s *Server) linked(ctx context.Context) (context.Context, context.CancelFunc, *apiError) {
	l := s.link
	l.mu.Lock()
	down, lctx := l.down, l.ctx
	l.mu.Unlock()
	if down {
		return ctx, func() {}, s.unreachable()
	}
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(lctx, func() { cancel(ErrFleetUnreachable) })
	return ctx, func() { stop(); cancel(nil) }, nil
}

func (s *Server) unreachable() *apiError {
	e := newError(http.StatusServiceUnavailable, codeFleetUnreachable, "the gateway has no connection to the fleet right now: retry shortly")
	e.retryAfter = s.cfg.RetryAfter
	return e
}

// linkCause is err, or ErrFleetUnreachable when ctx ended because the
// connection dropped.
func (s *Server) linkCause(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrFleetUnreachable) {
		return ErrFleetUnreachable
	}
	return err
}
