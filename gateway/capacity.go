package gateway

import (
	"context"
	"sync"
	"time"
)

// capacity is what the gateway knows of the fleet's interactive
// capacity: how many members answer and how many estimated tokens each
// holds. It sizes the parts of a call (none larger than the smallest
// member's budget) and the window (the sum of them). It is asked again
// once it is older than the health window, in the background; only the
// very first call waits for the answer.
type capacity struct {
	mu        sync.Mutex
	members   int
	part      int // the smallest member's capacity
	total     int
	maxTokens int
	refreshed time.Time
	asking    bool
	first     chan struct{} // closed after the first look, answered or not
}

func newCapacity() *capacity {
	return &capacity{members: 1, part: DefaultMemberTokens, total: DefaultMemberTokens, first: make(chan struct{})}
}

// maxInput is the members' longest text in tokens (0: unknown).
func (c *capacity) maxInput() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.maxTokens
}

// partTokens is the largest part a member takes at once.
func (c *capacity) partTokens() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.part
}

// refresh looks at the fleet again when the last look is older than
// every: in the background, except before the first look, which the
// caller waits for (bounded by ctx).
func (s *Server) refreshCapacity(ctx context.Context) {
	c := s.capacity
	c.mu.Lock()
	stale := time.Since(c.refreshed) >= s.cfg.HealthWindow
	start := stale && !c.asking
	if start {
		c.asking = true
	}
	first := c.first
	c.mu.Unlock()
	if start {
		go s.lookAtFleet(context.WithoutCancel(ctx))
	}
	select {
	case <-first:
	case <-ctx.Done():
	}
}

// lookAtFleet lists the members (or pings one) and resizes the window.
func (s *Server) lookAtFleet(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	var members []Member
	var err error
	if l, ok := s.cfg.Pinger.(MemberLister); ok {
		members, err = l.Members(ctx)
	} else if s.cfg.Pinger != nil {
		var m Member
		if m, err = s.cfg.Pinger.Ping(ctx); err == nil {
			members = []Member{m}
		}
	}
	c := s.capacity
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asking = false
	c.refreshed = time.Now()
	select {
	case <-c.first:
	default:
		close(c.first)
	}
	if err != nil || len(members) == 0 {
		// Keep what was known: a member that does not answer INFO now
		// may still answer requests.
		c.refreshed = time.Now().Add(-s.cfg.HealthWindow + time.Second)
		return
	}
	part, total, maxTokens := 0, 0, 0
	for _, m := range members {
		if m.MaxTokens > 0 && (maxTokens == 0 || m.MaxTokens < maxTokens) {
			maxTokens = m.MaxTokens
		}
		if m.Version != "" {
			s.health.sawVersion(m.Version)
		}
		n := m.InteractiveTokens
		if n <= 0 {
			n = DefaultMemberTokens
		}
		total += n
		if part == 0 || n < part {
			part = n
		}
		if m.Model != "" {
			s.health.sawModel(m.Model)
		}
	}
	s.health.answered(time.Now())
	c.members, c.part, c.total, c.maxTokens = len(members), part, total, maxTokens
	s.window.setCap(total)
}
