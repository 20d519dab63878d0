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
// the fleet, the body (whole, within a deadline sized to it and the
// gateway's byte budget), and only then a slot of MaxConcurrent.

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
			if aerr.Code == codeBodyTimeout {
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
// at most MaxBodyBytes, at no less than MinBodyRate after HeaderTimeout,
// and within the gateway's body budget. release gives the budget back.
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
	var reserved int64
	release = func() { s.bodies.give(reserved) }
	reserve := func(n int64) bool {
		if !s.bodies.take(n) {
			return false
		}
		reserved += n
		return true
	}
	const chunk = 64 << 10
	first := int64(chunk)
	if r.ContentLength >= 0 {
		first = r.ContentLength + 1 // room for the EOF without growing
	}
	first = min(first, limit+1)
	if !reserve(first) {
		return nil, nil, s.bodyBusy()
	}
	buf := make([]byte, 0, first)
	for {
		if len(buf) == cap(buf) {
			grow := min(max(int64(cap(buf)), chunk), limit+1-int64(cap(buf)))
			if grow <= 0 || !reserve(grow) {
				release()
				if grow <= 0 {
					return nil, nil, newError(http.StatusRequestEntityTooLarge, codeBodyTooLarge, "the body is over the limit of %d bytes", limit)
				}
				return nil, nil, s.bodyBusy()
			}
			buf = slices.Grow(buf, int(grow))
		}
		// The body's deadline grows with it: HeaderTimeout of grace, then
		// MinBodyRate for every byte it may hold.
		due := start.Add(s.cfg.HeaderTimeout + time.Duration(float64(cap(buf))/float64(s.cfg.MinBodyRate)*float64(time.Second)))
		_ = rc.SetReadDeadline(due)
		n, err := r.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
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

func (s *Server) bodyBusy() *apiError {
	e := newError(http.StatusTooManyRequests, codeGatewayBusy, "this gateway is reading %d bytes of bodies, its limit: retry later", s.cfg.BodyBudget)
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

// byteBudget bounds the bytes of bodies being read.
type byteBudget struct {
	mu   sync.Mutex
	used int64
	cap  int64
}

func (b *byteBudget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.cap && b.used > 0 {
		return false
	}
	b.used += n
	return true
}

func (b *byteBudget) give(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
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
