package gateway

import (
	"context"
	crand "crypto/rand"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/jetembed/jetembed/schema"
)

// embedded is what the fleet answered for all the inputs of one call.
type embedded struct {
	mu     sync.Mutex
	items  []schema.Item
	model  string
	tokens int
}

// part is one fleet job's share of a call: texts[from:to], of tokens
// estimated tokens.
type part struct{ from, to, tokens int }

// split cuts texts into jobs of at most jobTexts texts, jobBytes bytes of
// text and partTokens estimated tokens (a single larger text still goes
// alone), in order.
func split(texts []string, jobTexts, jobBytes, partTokens int) []part {
	var parts []part
	from, bytes, tokens := 0, 0, 0
	for i, t := range texts {
		n := schema.EstimateTokens(t)
		if i > from && (i-from >= jobTexts || bytes+len(t) > jobBytes || tokens+n > partTokens) {
			parts = append(parts, part{from, i, tokens})
			from, bytes, tokens = i, 0, 0
		}
		bytes += len(t)
		tokens += n
	}
	return append(parts, part{from, len(texts), tokens})
}

// overloadRetries bound how often a part a member refused overloaded is
// sent again (after 100, 200, 400 ms): the call was admitted, and a
// member's queue filled by other gateways empties fast, but a fleet that
// keeps refusing is answered 429.
const overloadRetries = 3

// embed sends texts to the fleet as one or more jobs and reassembles the
// items in input order. The call is admitted as a whole against the
// gateway's window (429 overloaded, with the Retry-After of the measured
// drain rate, when it could not start in time); its parts then wait their
// turn in the window, at most c.Parallel at a time. The first failure
// cancels the jobs still out and is returned.
func (s *Server) embed(ctx context.Context, texts []string, outputs []schema.Output, truncate *bool) (*embedded, error) {
	s.refreshCapacity(ctx)
	parts := split(texts, s.cfg.JobTexts, s.cfg.JobBytes, s.capacity.partTokens())
	out := &embedded{items: make([]schema.Item, len(texts))}
	err := s.send(ctx, parts, func(ctx context.Context, p part, id string) error {
		return s.embedPart(ctx, out, texts, p, outputs, truncate, id)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// send admits a call of parts and runs do on each, at most c.Parallel at
// a time, each holding its tokens of the window. It returns the first
// failure, which cancels the others.
func (s *Server) send(ctx context.Context, parts []part, do func(ctx context.Context, p part, id string) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	total := 0
	for _, p := range parts {
		total += p.tokens
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(s.cfg.Timeout)
	}
	if retry, ok := s.window.admit(total, time.Now(), deadline); !ok {
		e := newError(http.StatusTooManyRequests, string(schema.CodeOverloaded),
			"the fleet is busy: at its measured rate this call of about %d tokens could not start within its timeout; retry in %s", total, retry.Round(time.Second))
		e.retryAfter = retry
		return e
	}
	base := "gw-" + crand.Text()[:16]
	var (
		mu      sync.Mutex
		first   error
		wg      sync.WaitGroup
		sem     = make(chan struct{}, s.cfg.Parallel)
		pending = total
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
			cancel(err)
		}
		mu.Unlock()
	}
	for n, p := range parts {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		held, err := s.window.acquire(ctx, p.tokens)
		pending -= p.tokens
		if err != nil {
			<-sem
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := do(ctx, p, base+"-"+strconv.Itoa(n))
			s.window.release(held, err == nil)
			if err != nil {
				fail(err)
			}
		}()
	}
	s.window.forfeit(pending)
	wg.Wait()
	if first != nil {
		return first
	}
	return context.Cause(ctx)
}

// embedPart sends texts[p.from:p.to] as one job and stores its items in
// out. A result too large for one message (result_too_large, the fleet
// without blobs) is asked again in two halves, down to single texts; a
// job a member refused overloaded is sent again a few times.
func (s *Server) embedPart(ctx context.Context, out *embedded, texts []string, p part,
	outputs []schema.Output, truncate *bool, id string) error {
	job := &schema.Job{V: schema.Version, ID: id, Texts: texts[p.from:p.to], Outputs: outputs, Truncate: truncate, Deadline: jobDeadline(ctx)}
	res, err := s.callRetrying(ctx, job)
	if errors.Is(err, &schema.Error{Code: schema.CodeResultTooLarge}) && p.to-p.from > 1 {
		mid := (p.from + p.to) / 2
		if err := s.embedPart(ctx, out, texts, part{p.from, mid, 0}, outputs, truncate, id+"a"); err != nil {
			return err
		}
		return s.embedPart(ctx, out, texts, part{mid, p.to, 0}, outputs, truncate, id+"b")
	}
	if err != nil {
		return err
	}
	if len(res.Items) != p.to-p.from {
		return schema.Errorf(schema.CodeInternal, "the fleet answered %d items for %d texts", len(res.Items), p.to-p.from)
	}
	out.add(p.from, res.Items, res.Usage.Tokens, res.Model)
	return nil
}

func (out *embedded) add(at int, items []schema.Item, tokens int, model string) {
	out.mu.Lock()
	defer out.mu.Unlock()
	copy(out.items[at:], items)
	out.tokens += tokens
	if out.model == "" {
		out.model = model
	}
}

// jobDeadline is ctx's deadline in the wire format ("" without one).
func jobDeadline(ctx context.Context) string {
	if d, ok := ctx.Deadline(); ok {
		return d.UTC().Format(time.RFC3339Nano)
	}
	return ""
}

// callRetrying is call, sending again a job a member refused overloaded
// (its queue full of other gateways' work).
func (s *Server) callRetrying(ctx context.Context, job *schema.Job) (*schema.Result, error) {
	return s.retrying(ctx, func() (*schema.Result, error) { return s.call(ctx, job) })
}

// retrying runs f again after a short backoff while it is refused
// overloaded, up to overloadRetries times while ctx allows.
func (s *Server) retrying(ctx context.Context, f func() (*schema.Result, error)) (*schema.Result, error) {
	delay := 100 * time.Millisecond
	for attempt := 0; ; attempt++ {
		res, err := f()
		if attempt == overloadRetries || !errors.Is(err, &schema.Error{Code: schema.CodeOverloaded}) {
			return res, err
		}
		jitter := time.Duration(rand.Int64N(int64(delay / 2)))
		t := time.NewTimer(delay + jitter)
		select {
		case <-ctx.Done():
			t.Stop()
			return res, err
		case <-t.C:
		}
		delay *= 2
	}
}

// call is one fleet job, counted in the metrics and in the member's
// liveness: any decoded answer, refusals included, means a member is up.
func (s *Server) call(ctx context.Context, job *schema.Job) (*schema.Result, error) {
	res, err := s.cfg.Requester.Request(ctx, job)
	s.observe(err)
	if err != nil {
		return nil, s.linkCause(ctx, err)
	}
	if res != nil && res.Model != "" {
		s.health.sawModel(res.Model)
	}
	return res, nil
}

// observe counts one fleet answer in the metrics and the member's
// liveness.
func (s *Server) observe(err error) {
	var se *schema.Error
	if err == nil || errors.As(err, &se) {
		s.health.answered(time.Now())
	}
	s.metrics.fleetCall(err)
}
