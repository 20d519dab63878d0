package jetstream

import (
	"context"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// buffered is one pulled message waiting for the sink.
type buffered struct {
	m       natsjs.Msg
	size    int
	touched time.Time // received, or last InProgress
	// release ends the sink's keeping of m (nil when this loop's own
	// heartbeater keeps it).
	release func() time.Time
}

// heartbeater sends InProgress for every buffered message that waited a
// quarter of AckWait since it arrived or since its last InProgress, for a
// sink that does not keep them itself (the job loop does: [keeper]).
func (p *PullLoop) heartbeater(ctx context.Context) {
	every := max(p.o.ackWait/4, time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-t.C:
		}
		now := p.o.now()
		p.mu.Lock()
		for _, b := range p.buf {
			if now.Sub(b.touched) >= every {
				if err := b.m.InProgress(); err != nil {
					p.o.logger.Debug("in progress of a buffered message failed", "err", err)
				}
				b.touched = now
			}
		}
		p.mu.Unlock()
	}
}

// msgSize is what a message counts against a pull request's byte cap.
func msgSize(m natsjs.Msg) int {
	n := len(m.Data()) + len(m.Subject()) + len(m.Reply())
	for k, vs := range m.Headers() {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// backoff is the wait before pulling again after a failed pull request:
// from 100ms doubling to 5s.
type backoff struct{ d time.Duration }

func (b *backoff) next() time.Duration {
	b.d = min(max(2*b.d, 100*time.Millisecond), 5*time.Second)
	return b.d
}
