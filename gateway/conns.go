package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// connReserve is how many file descriptors of the process's limit the
// connection cap leaves for everything else: NATS, the ops port and its
// scrapes, files, and the connections being refused.
func connReserve(limit int) int { return max(32, limit/8) }

// ConnCap is the cap on open connections for a process whose file limit
// is nofile (0: unknown): want (0: [DefaultMaxConns]), kept below nofile
// less a reserve.
func ConnCap(want, nofile int) int {
	if want <= 0 {
		want = DefaultMaxConns
	}
	if nofile > 0 {
		want = min(want, max(nofile-connReserve(nofile), 1))
	}
	return want
}

// conns is a listener that keeps the connections it hands out under a cap,
// in all and per client address. At the cap, a new connection takes the
// place of the oldest idle one (a keep-alive connection between requests,
// else one that has sent no request yet); with none to close (all busy
// with calls), it is answered 503 (plain HTTP) or closed (TLS). Accept errors (the process
// out of file descriptors) close an idle connection, are logged as the
// process's logs are, at most once a second, and are retried with backoff:
// Accept returns only when the listener is closed.
type conns struct {
	net.Listener
	max, perClient int
	tls            bool
	log            *slog.Logger
	// minRate is the body rate below which a connection reading a body
	// may be shed (on average since its body began), once the body has
	// had slowGrace to get going.
	minRate   int
	slowGrace time.Duration

	mu       sync.Mutex
	open     map[net.Conn]*connInfo
	byClient map[string]int
	lastLog  time.Time
	skipped  int    // accept errors not logged since the last line
	refused  func() // counts a refused connection in the metrics
}

type connInfo struct {
	client string
	state  http.ConnState
	since  time.Time // of the state
	// bodies are the request bodies being read on it (one, or a few
	// streams of HTTP/2).
	bodies []*bodyProgress
}

func newConns(ln net.Listener, max, perClient int, tls bool, log *slog.Logger, refused func(), minRate int, slowGrace time.Duration) *conns {
	return &conns{Listener: ln, max: max, perClient: perClient, tls: tls, log: log, minRate: minRate, slowGrace: slowGrace,
		open: make(map[net.Conn]*connInfo), byClient: make(map[string]int), refused: refused}
}

// slowBodyGrace is how long a body is read before it may count as slow
// for shedding (at most the header timeout): long enough for a real
// client's first bytes, far shorter than the body's own deadline, which
// alone would let a body that never comes hold its connection for the
// whole grace.
const slowBodyGrace = time.Second

// connKey is the context key of the connection a request came on (the
// http.Server's ConnContext sets it).
type connKey struct{}

type connRef struct {
	l *conns
	c net.Conn
}

// withConn is the http.Server's ConnContext: requests know their
// connection, so that a body read slowly can be shed with it.
func (l *conns) withConn(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	return context.WithValue(ctx, connKey{}, connRef{l: l, c: c})
}

// bodyProgress is one body being read: when it began and the bytes that
// came.
type bodyProgress struct {
	ref   connRef
	start time.Time
	n     atomic.Int64
}

// bodyStarted marks the connection of ctx as reading a body from start.
func bodyStarted(ctx context.Context, start time.Time) *bodyProgress {
	p := &bodyProgress{start: start}
	ref, ok := ctx.Value(connKey{}).(connRef)
	if !ok || ref.l == nil {
		return p
	}
	p.ref = ref
	ref.l.mu.Lock()
	defer ref.l.mu.Unlock()
	if ci, ok := ref.l.open[ref.c]; ok {
		ci.bodies = append(ci.bodies, p)
	}
	return p
}

func (p *bodyProgress) add(n int64) { p.n.Add(n) }

// done unmarks the body.
func (p *bodyProgress) done() {
	l := p.ref.l
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if ci, ok := l.open[p.ref.c]; ok {
		ci.bodies = slices.DeleteFunc(ci.bodies, func(q *bodyProgress) bool { return q == p })
	}
}

// slowBody reports whether one of ci's bodies, begun at least grace ago,
// came slower than rate bytes a second on average since it began, and
// since when the oldest did. A body just begun is never slow: its first
// bytes may still be on their way (TCP slow start), and one new
// connection must not push out another that has barely begun.
func (ci *connInfo) slowBody(now time.Time, rate int, grace time.Duration) (bool, time.Time) {
	var oldest time.Time
	slow := false
	for _, p := range ci.bodies {
		if age := now.Sub(p.start); age >= grace && float64(p.n.Load()) < float64(rate)*age.Seconds() {
			if !slow || p.start.Before(oldest) {
				oldest = p.start
			}
			slow = true
		}
	}
	return slow, oldest
}

// Accept returns the next connection the caps allow.
func (l *conns) Accept() (net.Conn, error) {
	delay := 5 * time.Millisecond
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil, err
			}
			var ne net.Error
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.As(err, &ne) && ne.Timeout() {
				l.shedOne()
			}
			l.logAcceptError(err)
			time.Sleep(delay)
			delay = min(2*delay, time.Second)
			continue
		}
		delay = 5 * time.Millisecond
		if l.admit(c) {
			return c, nil
		}
		l.refuse(c)
	}
}

// admit counts c in, closing an idle connection to make room when at a
// cap; false means c may not stay.
func (l *conns) admit(c net.Conn) bool {
	client := hostOf(c.RemoteAddr())
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byClient[client] >= l.perClient && !l.shedLocked(client) {
		return false
	}
	if len(l.open) >= l.max && !l.shedLocked("") {
		return false
	}
	l.open[c] = &connInfo{client: client, state: http.StateNew, since: time.Now()}
	l.byClient[client]++
	return true
}

// shedOne closes the oldest idle connection.
func (l *conns) shedOne() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.shedLocked("")
}

// shedLocked closes the oldest idle connection of client (any client when
// empty): an idle keep-alive first, else one whose body comes slower than
// the minimum rate, else the one that has waited longest without sending
// a request (a client that means to call sends its request as soon as it
// connects). For any client, it looks first among the connections of the
// client that holds the most that may be shed (idle, silent, or reading a
// slow body; not those busy with a call): under a flood from a few
// addresses the flood's connections churn so fast that a lone caller's,
// accepted but not yet read, could be the oldest that sent nothing. A
// caller whose other connections are busy holds no more of them than a
// flood address with one, so a flood from many addresses does not make
// its new connection the one shed. It forgets it at once, so the room is
// there now.
func (l *conns) shedLocked(client string) bool {
	if client == "" {
		now := time.Now()
		idle := map[string]int{}
		top, most := "", 0
		for _, ci := range l.open {
			if ci.state == http.StateActive {
				if slow, _ := ci.slowBody(now, l.minRate, l.slowGrace); l.minRate <= 0 || !slow {
					continue
				}
			}
			idle[ci.client]++
			if n := idle[ci.client]; n > most || n == most && ci.client < top {
				top, most = ci.client, n
			}
		}
		if most > 1 && l.shedClientLocked(top) {
			return true
		}
	}
	return l.shedClientLocked(client)
}

// shedClientLocked is shedLocked's tiers among the connections of client
// (any client when empty).
func (l *conns) shedClientLocked(client string) bool {
	var victim net.Conn
	var oldest time.Time
	pick := func(state http.ConnState) {
		for c, ci := range l.open {
			if client != "" && ci.client != client || ci.state != state {
				continue
			}
			if victim == nil || ci.since.Before(oldest) {
				victim, oldest = c, ci.since
			}
		}
	}
	pick(http.StateIdle)
	// Then a connection whose body comes slower than the minimum rate
	// (the one whose slow body began first): reading it holds a
	// connection and budget for a client that does not send. It goes
	// before one that has sent nothing yet, which may be a client in its
	// TLS handshake.
	if victim == nil && l.minRate > 0 {
		now := time.Now()
		for c, ci := range l.open {
			if client != "" && ci.client != client {
				continue
			}
			if slow, since := ci.slowBody(now, l.minRate, l.slowGrace); slow && (victim == nil || since.Before(oldest)) {
				victim, oldest = c, since
			}
		}
	}
	if victim == nil {
		pick(http.StateNew)
	}
	if victim == nil {
		return false
	}
	l.forgetLocked(victim)
	_ = victim.Close()
	return true
}

func (l *conns) forgetLocked(c net.Conn) {
	ci, ok := l.open[c]
	if !ok {
		return
	}
	delete(l.open, c)
	if l.byClient[ci.client]--; l.byClient[ci.client] <= 0 {
		delete(l.byClient, ci.client)
	}
}

// refused503 is written to a plain HTTP connection the caps refuse.
var refused503 = func() []byte {
	body := `{"error":{"message":"too many open connections to this gateway: retry shortly","type":"server_error","param":null,"code":"` + codeTooManyConns + `"}}` + "\n"
	return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}()

func (l *conns) refuse(c net.Conn) {
	if l.refused != nil {
		l.refused()
	}
	if !l.tls {
		_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		_, _ = c.Write(refused503)
	}
	_ = c.Close()
}

// track follows the http.Server's view of each connection (its
// ConnState hook).
func (l *conns) track(c net.Conn, state http.ConnState) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch state {
	case http.StateClosed, http.StateHijacked:
		l.forgetLocked(c)
	default:
		if ci, ok := l.open[c]; ok {
			ci.state, ci.since = state, time.Now()
		}
	}
}

// logAcceptError logs an accept failure at most once a second, with how
// many were not logged.
func (l *conns) logAcceptError(err error) {
	l.mu.Lock()
	now := time.Now()
	if now.Sub(l.lastLog) < time.Second {
		l.skipped++
		l.mu.Unlock()
		return
	}
	l.lastLog = now
	n, skipped := len(l.open), l.skipped
	l.skipped = 0
	l.mu.Unlock()
	l.log.Warn("gateway: accepting a connection failed; closing an idle one and retrying", "err", err, "open", n, "max", l.max, "unlogged", skipped)
}

func hostOf(a net.Addr) string {
	if a == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}
