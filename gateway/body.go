package gateway

import (
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// The order in which a call is taken in, so that no slot waits on a slow
// or unauthenticated client: method and API key (before any byte of the
// body), the client's own limit of calls in progress, the connection to
// the fleet, the body (whole, at a minimum pace, within the gateway's
// byte budget and the client's share of it, both taken as bytes come),
// and only then a slot of MaxConcurrent.

// post wraps the handler of a POST endpoint: h gets the whole body, once
// the call holds a slot.
func (s *Server) post(h func(w http.ResponseWriter, r *http.Request, body []byte)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		client := clientKey(r)
		if !s.clients.enter(client, s.cfg.ClientConcurrent) {
			writeError(w, newError(http.StatusTooManyRequests, codeClientBusy,
				"this client has %d calls in progress here, its limit: retry later", s.cfg.ClientConcurrent), s.retryAfter())
			return
		}
		defer s.clients.leave(client)
		if _, _, aerr := s.linked(r.Context()); aerr != nil {
			writeError(w, aerr, s.retryAfter())
			return
		}
		body, release, aerr := s.readBody(w, r)
		if aerr != nil {
			// A body left unread (too slow, or refused for the budget)
			// is not waited for: net/http would read what is left of it
			// before answering.
			if aerr.Code == codeBodyTimeout || aerr.Code == codeGatewayBusy || aerr.Code == codeClientBusy {
				w.Header().Set("Connection", "close")
			}
			writeError(w, aerr, s.retryAfter())
			return
		}
		select {
		case s.busy <- struct{}{}:
			defer func() { <-s.busy }()
		default:
			release()
			e := newError(http.StatusTooManyRequests, codeGatewayBusy,
				"this gateway has %d calls in flight, its limit: retry later", s.cfg.MaxConcurrent)
			e.retryAfter = s.window.retryAfter(s.cfg.RetryAfter)
			writeError(w, e, s.retryAfter())
			return
		}
		defer release()
		h(w, r, body)
	}
}

// readBody checks the body's headers and reads it whole: JSON only
// (Content-Type application/json, UTF-8, or none), no Content-Encoding,
// at most MaxBodyBytes, at no less than MinBodyRate over a sliding window
// after HeaderTimeout's grace, and within the gateway's body budget and
// the client's share of it. The budget is taken as bytes arrive (the
// buffer grows only when full): a declared Content-Length reserves
// nothing, so bodies that are announced and not sent hold no budget and
// get no time. release gives the budget back.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) (body []byte, release func(), aerr *apiError) {
	if err := checkContentType(r.Header.Get("Content-Type")); err != nil {
		return nil, nil, err
	}
	if ce := strings.TrimSpace(r.Header.Get("Content-Encoding")); ce != "" && !strings.EqualFold(ce, "identity") {
		return nil, nil, newError(http.StatusUnsupportedMediaType, codeUnsupportedCoding,
			"Content-Encoding %s is not supported: send the body uncompressed", short(ce))
	}
	limit := s.cfg.MaxBodyBytes
	if r.ContentLength > limit {
		return nil, nil, newError(http.StatusRequestEntityTooLarge, codeBodyTooLarge, "the body is over the limit of %d bytes", limit)
	}
	rc := http.NewResponseController(w)
	start := time.Now()
	// The connection's read deadline is cleared once the body is in: a
	// deadline passing while the call runs would cancel it.
	defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
	client := clientKey(r)
	var reserved int64
	release = func() { s.bodies.give(client, reserved) }
	// reserve takes n more bytes of the budget, else says which share is
	// spent.
	reserve := func(n int64) *apiError {
		switch s.bodies.take(client, n, s.cfg.ClientBodyBudget) {
		case budgetFull:
			return s.bodyBusy()
		case clientShareFull:
			return s.clientBodyBusy()
		}
		reserved += n
		return nil
	}
	// Until the connection is shed for one that keeps a better pace (see
	// conns.shedLocked), it is marked as reading a body.
	progress := bodyStarted(r.Context(), start)
	defer progress.done()
	const chunk = 64 << 10
	// What the body may still hold: its declared length, else the limit.
	most := limit + 1
	if r.ContentLength >= 0 {
		most = r.ContentLength + 1 // room for the EOF without growing
	}
	first := min(int64(firstChunk), most)
	if aerr := reserve(first); aerr != nil {
		return nil, nil, aerr
	}
	buf := make([]byte, 0, first)
	pace := newPace(start, s.cfg.HeaderTimeout, s.cfg.MinBodyRate)
	for {
		if len(buf) == cap(buf) {
			grow := min(max(int64(cap(buf)), chunk), most-int64(cap(buf)), limit+1-int64(cap(buf)))
			if grow <= 0 {
				release()
				return nil, nil, newError(http.StatusRequestEntityTooLarge, codeBodyTooLarge, "the body is over the limit of %d bytes", limit)
			}
			if aerr := reserve(grow); aerr != nil {
				release()
				return nil, nil, aerr
			}
			buf = slices.Grow(buf, int(grow))
		}
		_ = rc.SetReadDeadline(pace.due())
		n, err := r.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if n > 0 {
			pace.add(time.Now(), int64(n))
			progress.add(int64(n))
		}
		if int64(len(buf)) > limit {
			release()
			return nil, nil, newError(http.StatusRequestEntityTooLarge, codeBodyTooLarge, "the body is over the limit of %d bytes", limit)
		}
		if errors.Is(err, io.EOF) {
			return buf, release, nil
		}
		if err != nil {
			release()
			var ne net.Error
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
				return nil, nil, newError(http.StatusRequestTimeout, codeBodyTimeout,
					"the body came slower than %d bytes a second: %d bytes in %s", s.cfg.MinBodyRate, len(buf), time.Since(start).Round(time.Millisecond))
			}
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				return nil, nil, newError(http.StatusRequestEntityTooLarge, codeBodyTooLarge, "the body is over the limit of %d bytes", limit)
			}
			return nil, nil, newError(http.StatusBadRequest, codeInvalidJSON, "the body could not be read: %v", err)
		}
	}
}

// firstChunk is the first reservation of a body (or its declared length
// when shorter): the budget then follows what came.
const firstChunk = 16 << 10

// pace is the body's deadline from the bytes that came: after the grace
// (HeaderTimeout from the start), every sliding window of that length
// must bring MinBodyRate x window bytes. A burst buys no more than one
// window of silence, and a body announced but not sent gets the grace
// alone.
type pace struct {
	start   time.Time
	window  time.Duration
	need    int64
	samples []paceSample // newest last, within two windows
}

type paceSample struct {
	at time.Time
	n  int64
}

func newPace(start time.Time, window time.Duration, rate int) *pace {
	window = max(window, 100*time.Millisecond)
	return &pace{start: start, window: window, need: max(int64(float64(rate)*window.Seconds()), 1)}
}

// add records n bytes come at now. Bytes within an eighth of a window
// count as come at its latest read.
func (p *pace) add(now time.Time, n int64) {
	if k := len(p.samples); k > 0 && now.Sub(p.samples[k-1].at) < p.window/8 {
		p.samples[k-1].at, p.samples[k-1].n = now, p.samples[k-1].n+n
	} else {
		p.samples = append(p.samples, paceSample{at: now, n: n})
	}
	cut := 0
	for cut < len(p.samples)-1 && now.Sub(p.samples[cut].at) > 2*p.window {
		cut++
	}
	p.samples = p.samples[cut:]
}

// due is when the body is too slow if nothing more comes: a window after
// the oldest read since which a window's worth of bytes came, and never
// before the grace ends.
func (p *pace) due() time.Time {
	due := p.start.Add(p.window)
	var sum int64
	for i := len(p.samples) - 1; i >= 0; i-- {
		sum += p.samples[i].n
		if sum >= p.need {
			if d := p.samples[i].at.Add(p.window); d.After(due) {
				due = d
			}
			break
		}
	}
	return due
}

func (s *Server) bodyBusy() *apiError {
	e := newError(http.StatusTooManyRequests, codeGatewayBusy, "this gateway is reading %d bytes of bodies, its limit: retry later", s.cfg.BodyBudget)
	e.retryAfter = s.cfg.RetryAfter
	return e
}

func (s *Server) clientBodyBusy() *apiError {
	e := newError(http.StatusTooManyRequests, codeClientBusy, "this client is sending %d bytes of bodies here, its share: retry later", s.cfg.ClientBodyBudget)
	e.retryAfter = s.cfg.RetryAfter
	return e
}

// checkContentType accepts application/json (with no parameter but
// charset=utf-8) and no Content-Type at all.
func checkContentType(ct string) *apiError {
	if strings.TrimSpace(ct) == "" {
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	ok := err == nil && mt == "application/json"
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			ok = false
		}
	}
	if !ok {
		return newError(http.StatusUnsupportedMediaType, codeUnsupportedContent,
			"the body must be JSON (Content-Type: application/json, UTF-8), not %s", short(ct))
	}
	return nil
}

// byteBudget bounds the bytes of bodies being read, in all and per
// client address.
type byteBudget struct {
	mu       sync.Mutex
	used     int64
	cap      int64
	byClient map[string]int64
}

// What [byteBudget.take] says.
const (
	budgetTaken = iota
	budgetFull
	clientShareFull
)

// take reserves n bytes for client, within the budget and the client's
// share of it (clientCap); a first reservation always fits, so a body
// larger than a share can still be read alone.
func (b *byteBudget) take(client string, n, clientCap int64) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	mine := b.byClient[client]
	if clientCap > 0 && mine+n > clientCap && mine > 0 {
		return clientShareFull
	}
	if b.used+n > b.cap && b.used > 0 {
		return budgetFull
	}
	if b.byClient == nil {
		b.byClient = map[string]int64{}
	}
	b.used += n
	b.byClient[client] = mine + n
	return budgetTaken
}

func (b *byteBudget) give(client string, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if b.byClient[client] -= n; b.byClient[client] <= 0 {
		delete(b.byClient, client)
	}
}

// clientCounts counts the calls in progress of each client address.
type clientCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *clientCounts) enter(key string, limit int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = make(map[string]int)
	}
	if c.n[key] >= limit {
		return false
	}
	c.n[key]++
	return true
}

func (c *clientCounts) leave(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[key]--; c.n[key] <= 0 {
		delete(c.n, key)
	}
}

// clientKey is the client's address without its port: the gateway does
// not trust forwarding headers anyone can set.
func clientKey(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
