package gateway

import (
	"context"
	"crypto/rand"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/jetembed/jetembed/schema"
)

// embedded is what the fleet answered for all the inputs of one call.
type embedded struct {
	items  []schema.Item
	model  string
	tokens int
}

// part is one fleet job's share of a call: texts[from:to].
type part struct{ from, to int }

// split cuts texts into jobs of at most jobTexts texts and jobBytes bytes
// of text (a single larger text still goes alone), in order.
func split(texts []string, jobTexts, jobBytes int) []part {
	var parts []part
	from, bytes := 0, 0
	for i, t := range texts {
		if i > from && (i-from >= jobTexts || bytes+len(t) > jobBytes) {
			parts = append(parts, part{from, i})
			from, bytes = i, 0
		}
		bytes += len(t)
	}
	return append(parts, part{from, len(texts)})
}

// embed sends texts to the fleet as one or more jobs, at most c.Parallel
// at a time, and reassembles the items in input order. The first failure
// cancels the jobs still out and is returned.
func (s *Server) embed(ctx context.Context, texts []string, outputs []schema.Output, truncate *bool) (*embedded, error) {
	parts := split(texts, s.cfg.JobTexts, s.cfg.JobBytes)
	out := &embedded{items: make([]schema.Item, len(texts))}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	deadline := ""
	if d, ok := ctx.Deadline(); ok {
		deadline = d.UTC().Format(time.RFC3339Nano)
	}
	base := "gw-" + rand.Text()[:16]

	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, s.cfg.Parallel)
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
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := s.embedPart(ctx, out, &mu, texts, p, outputs, truncate, deadline, base+"-"+strconv.Itoa(n)); err != nil {
				fail(err)
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	return out, nil
}

// embedPart sends texts[p.from:p.to] as one job and stores its items in
// out. A result too large for one message (result_too_large, the fleet
// without blobs) is asked again in two halves, down to single texts.
func (s *Server) embedPart(ctx context.Context, out *embedded, mu *sync.Mutex, texts []string, p part,
	outputs []schema.Output, truncate *bool, deadline, id string) error {
	job := &schema.Job{V: schema.Version, ID: id, Texts: texts[p.from:p.to], Outputs: outputs, Truncate: truncate, Deadline: deadline}
	res, err := s.call(ctx, job)
	if errors.Is(err, &schema.Error{Code: schema.CodeResultTooLarge}) && p.to-p.from > 1 {
		mid := (p.from + p.to) / 2
		if err := s.embedPart(ctx, out, mu, texts, part{p.from, mid}, outputs, truncate, deadline, id+"a"); err != nil {
			return err
		}
		return s.embedPart(ctx, out, mu, texts, part{mid, p.to}, outputs, truncate, deadline, id+"b")
	}
	if err != nil {
		return err
	}
	if len(res.Items) != p.to-p.from {
		return schema.Errorf(schema.CodeInternal, "the fleet answered %d items for %d texts", len(res.Items), p.to-p.from)
	}
	copy(out.items[p.from:p.to], res.Items)
	mu.Lock()
	defer mu.Unlock()
	out.tokens += res.Usage.Tokens
	if out.model == "" {
		out.model = res.Model
	}
	return nil
}

// call is one fleet job, counted in the metrics and in the member's
// liveness: any decoded answer, refusals included, means a member is up.
func (s *Server) call(ctx context.Context, job *schema.Job) (*schema.Result, error) {
	res, err := s.cfg.Requester.Request(ctx, job)
	var se *schema.Error
	answered := err == nil || errors.As(err, &se)
	if answered {
		s.health.answered(time.Now())
		if res != nil && res.Model != "" {
			s.health.sawModel(res.Model)
		}
	}
	s.metrics.fleetCall(err)
	if err != nil {
		return nil, err
	}
	return res, nil
}
