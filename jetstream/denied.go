package jetstream

import (
	"context"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetembed/jetembed/consumer"
)

// A core publish the server refuses is not an error of the publish call:
// the server answers with -ERR 'Permissions Violation for Publish to
// "<subject>"', which nats.go records as the connection's last error and
// hands to the async error handler. [confirmCore] publishes, flushes (the
// server answers in order, so the violation is read before the flush's
// PONG), and then correlates the violation to the subject it names.

// deniedRe finds the subject in a publish permission violation.
var deniedRe = regexp.MustCompile(`(?i)permissions violation for publish to "([^"]+)"`)

// deniedWait bounds the wait for the async error handler to catch up with
// a violation read before a flush completed.
const deniedWait = 2 * time.Second

// deniedLog is how many recent violations a connection remembers.
const deniedLog = 256

// staleWindow is how long after a reconnect a request may still be one the
// old connection delivered: the service handles requests in order, and one
// that waited behind an answer flushing across the reconnect is handled
// after it. A flush gives up after [publishTimeout]. (A variable for the
// tests.)
var staleWindow = publishTimeout

// denials records the publish permission violations of one connection, in
// the order nats.go delivered them to the async error handler, and when
// the connection last reconnected.
type denials struct {
	mu      sync.Mutex
	seq     uint64
	recent  []denial // the last deniedLog, oldest first
	last    error    // the last error value the handler saw
	changed chan struct{}

	reconnects    uint64    // the connection's reconnect count the handler last saw
	reconnectedAt time.Time // when the reconnect handler last ran
	pendingSince  time.Time // when a count its handler has not seen was first met
}

type denial struct {
	seq     uint64
	subject string
}

// trackers holds one denials per connection that published core replies.
var trackers sync.Map // *nats.Conn -> *denials

// deniedTracker returns nc's tracker, installing it in front of the
// connection's own error handler on first use.
func deniedTracker(nc *nats.Conn) *denials {
	if t, ok := trackers.Load(nc); ok {
		return t.(*denials)
	}
	t := &denials{changed: make(chan struct{}), reconnects: nc.Stats().Reconnects}
	if prev, loaded := trackers.LoadOrStore(nc, t); loaded {
		return prev.(*denials)
	}
	next := nc.Opts.AsyncErrorCB
	nc.SetErrorHandler(func(c *nats.Conn, sub *nats.Subscription, err error) {
		t.record(err)
		if next != nil {
			next(c, sub, err)
		}
	})
	nc.SetClosedHandler(chainHandler(nc.Opts.ClosedCB, func() { trackers.Delete(nc) }))
	nc.SetReconnectHandler(chainHandler(nc.Opts.ReconnectedCB, func() { t.reconnected(nc.Stats().Reconnects) }))
	return t
}

func chainHandler(next nats.ConnHandler, also func()) nats.ConnHandler {
	return func(c *nats.Conn) {
		also()
		if next != nil {
			next(c)
		}
	}
}

func (t *denials) record(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.last = err
	if m := deniedRe.FindStringSubmatch(errString(err)); m != nil {
		t.seq++
		t.recent = append(t.recent, denial{seq: t.seq, subject: m[1]})
		if len(t.recent) > deniedLog {
			t.recent = t.recent[len(t.recent)-deniedLog:]
		}
	}
	close(t.changed)
	t.changed = make(chan struct{})
}

// reconnected records a reconnect (n is the connection's count after it).
func (t *denials) reconnected(n uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reconnects, t.reconnectedAt, t.pendingSince = n, time.Now(), time.Time{}
}

// mayBeStale reports whether a request handled now may have been delivered
// on a connection since lost: nc reconnected less than [staleWindow] ago,
// or its reconnect handler (which runs asynchronously) has not yet seen
// the last reconnect. Should the handler never run (replaced), a count it
// missed ages out as well.
func (t *denials) mayBeStale(nc *nats.Conn) bool {
	n, now := nc.Stats().Reconnects, time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if n != t.reconnects {
		if t.pendingSince.IsZero() {
			t.pendingSince = now
		}
		if now.Sub(t.pendingSince) < staleWindow {
			return true
		}
		t.reconnects, t.reconnectedAt, t.pendingSince = n, t.pendingSince, time.Time{}
	}
	return !t.reconnectedAt.IsZero() && now.Sub(t.reconnectedAt) < staleWindow
}

// mark is the sequence of the last violation recorded.
func (t *denials) mark() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.seq
}

// deniedSince reports whether subject was denied after mark, first waiting
// (up to deniedWait) until the handler has seen until, the connection's
// last error after the flush.
func (t *denials) deniedSince(ctx context.Context, mark uint64, subject string, until error) bool {
	deadline := time.NewTimer(deniedWait)
	defer deadline.Stop()
	for {
		t.mu.Lock()
		caught := until == nil || t.last == until
		for _, d := range t.recent {
			if d.seq > mark && d.subject == subject {
				t.mu.Unlock()
				return true
			}
		}
		ch := t.changed
		t.mu.Unlock()
		if caught {
			return false
		}
		select {
		case <-ch:
		case <-deadline.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// deniedError is the error of a publish the server refused.
func deniedError(subject string) error {
	return fmt.Errorf("%w: the server refused the publish to %s (permissions violation)", consumer.ErrPublishDenied, subject)
}

// confirmCore runs publish (a core publish to subject), flushes, and
// reports a permission violation for subject as an error wrapping
// [consumer.ErrPublishDenied].
func confirmCore(ctx context.Context, nc *nats.Conn, subject string, publish func() error) error {
	t := deniedTracker(nc)
	before, mark := nc.LastError(), t.mark()
	if err := publish(); err != nil {
		return fmt.Errorf("publish result to %s: %w", subject, err)
	}
	if err := nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("%w: result to %s: %w", ErrNotConfirmed, subject, err)
	}
	after := nc.LastError()
	if sameError(after, before) {
		return nil // no error at all was read while this publish was out
	}
	if m := deniedRe.FindStringSubmatch(errString(after)); m != nil && m[1] == subject {
		return deniedError(subject)
	}
	// Another error came last: ours, if any, went to the handler before it.
	if t.deniedSince(ctx, mark, subject, after) {
		return deniedError(subject)
	}
	return nil
}

// sameError compares two last-error values by identity (nats.go makes a
// new error value for each).
func sameError(a, b error) (same bool) {
	defer func() {
		if recover() != nil {
			same = false // an uncomparable error type
		}
	}()
	return a == b
}
