package consumer

import (
	"sync"
	"time"
)

// The job loop is the one owner of InProgress heartbeats: for the jobs it
// holds, those waiting in Submit for room, and the messages a fetch loop
// pulled and has not handed over yet ([Loop.Keep]), so one goroutine
// ([Loop.heartbeats]) keeps every message of the process alive.

// kept is a message kept alive before its delivery reaches the loop.
type kept struct {
	mu       sync.Mutex
	m        Message
	touched  time.Time // received, or last InProgress
	released bool
}

// Keep heartbeats m, received at since, until release is called (before
// the message is submitted or given back); release returns when m was
// last touched, for the delivery's Received. It is how a fetch loop's
// buffered messages share the loop's one heartbeat owner.
func (c *Loop) Keep(m Message, since time.Time) (release func() time.Time) {
	k := &kept{m: m, touched: since}
	c.mu.Lock()
	if c.kept == nil {
		c.kept = map[*kept]struct{}{}
	}
	c.kept[k] = struct{}{}
	c.mu.Unlock()
	return func() time.Time {
		c.mu.Lock()
		delete(c.kept, k)
		c.mu.Unlock()
		k.mu.Lock()
		defer k.mu.Unlock()
		k.released = true
		return k.touched
	}
}

// heartbeat sends InProgress when m waited every since it was last touched.
func (k *kept) heartbeat(now time.Time, every time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.released || now.Sub(k.touched) < every {
		return
	}
	k.touched = now
	_ = k.m.InProgress()
}
