package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/schema"
)

// This file is the bulk half of `jetembed submit`: jobs out, results back
// in input order, resumable from the results stream. The input is streamed:
// memory holds the input lines (ids, not texts) of the jobs between the
// first one not yet written and the last one submitted, at most
// windowFactor x --max-inflight jobs; results that arrive before the jobs
// ahead of them wait in a spool file.

// windowFactor bounds how far submission runs ahead of the oldest
// unwritten job, in multiples of --max-inflight: far enough that one slow
// job does not stall the run, near enough that the lines kept for it stay
// small.
const windowFactor = 8

// lineMeta is what is kept of an input line until its result is written.
type lineMeta struct {
	id  string
	err *schema.Error
}

// bulkJob is one job of a bulk run: the input lines it covers.
type bulkJob struct {
	lines []lineMeta
	texts int // lines with a text
}

type bulk struct {
	c       *client.Client
	prefix  string // job ids are prefix + job number
	f       submitFlags
	cut     jobCut
	outs    []schema.Output
	log     *slog.Logger
	window  int
	changed chan struct{} // a job was written or answered (capacity 1)

	mu        sync.Mutex
	jobs      map[int]*bulkJob // read, not yet written
	submitted map[int]bool     // submitted, not yet answered
	spool     *spool
	next      int // first job not yet written
	enc       *json.Encoder
	bar       *progress
	lines     int   // lines written
	cached    int   // texts the fleet's cache answered (usage.cached)
	failed    int   // of which failed
	answered  int   // texts answered (for the progress watch)
	err       error // the first write error
}

func newBulk(c *client.Client, run string, f submitFlags, cut jobCut, outs []schema.Output, log *slog.Logger) (*bulk, error) {
	sp, err := newSpool()
	if err != nil {
		return nil, err
	}
	return &bulk{
		c: c, prefix: run + "-", f: f, cut: cut, outs: outs, log: log,
		window:  windowFactor * *f.maxInFlight,
		changed: make(chan struct{}, 1),
		jobs:    map[int]*bulkJob{}, submitted: map[int]bool{}, spool: sp,
	}, nil
}

func (b *bulk) close() { _ = b.spool.Close() }

// jobNumber parses the number of one of this run's job ids.
func (b *bulk) jobNumber(id string) (int, bool) {
	s, ok := strings.CutPrefix(id, b.prefix)
	if !ok {
		return 0, false
	}
	k, err := strconv.Atoi(s)
	return k, err == nil && k >= 0
}

// jobOfSubject finds the job whose result subject is subject, for a result
// whose body does not decode (so has no id).
func (b *bulk) jobOfSubject(subject string) (int, bool) {
	tok := subject[strings.LastIndexByte(subject, '.')+1:]
	if enc, ok := strings.CutPrefix(tok, "~"); ok {
		id, err := base64.RawURLEncoding.DecodeString(enc)
		if err != nil {
			return 0, false
		}
		tok = string(id)
	}
	return b.jobNumber(tok)
}

// take records one stored result. A result that does not decode is turned
// into an internal error for its job's lines: resubmitting the job would
// not help, since the stream's duplicate window drops a second result with
// the same job id, and the run would wait for it forever.
func (b *bulk) take(sr client.StoredResult, err error) error {
	var k int
	var ok bool
	res := sr.Result
	switch {
	case errors.Is(err, client.ErrForeignResult):
		// Not the fleet's (a message relayed to the run's subject): it
		// settles no job.
		b.log.Warn("ignoring a message of the results stream the fleet did not write", "subject", sr.Subject, "err", err)
		return nil
	case errors.Is(err, client.ErrBadResult):
		k, ok = b.jobOfSubject(sr.Subject)
		b.log.Warn("stored result does not decode: its lines get an internal error", "subject", sr.Subject, "err", err)
		res = schema.ErrorResult("", schema.Errorf(schema.CodeInternal, "stored result does not decode: %v", err))
	case err != nil:
		return err
	default:
		k, ok = b.jobNumber(sr.ID)
	}
	if !ok {
		return nil // another run's, or an older input's
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if k < b.next || b.spool.Has(k) {
		return nil // a duplicate
	}
	if b.submitted[k] {
		delete(b.submitted, k)
		if j := b.jobs[k]; j != nil {
			b.bar.add(j.texts)
			b.answered += j.texts
		}
	}
	if err := b.spool.Put(k, res); err != nil {
		return err
	}
	b.flush()
	b.notify()
	return b.err
}

func (b *bulk) notify() {
	select {
	case b.changed <- struct{}{}:
	default:
	}
}

// flush writes the jobs at the head whose results are in; b.mu held.
func (b *bulk) flush() {
	for b.err == nil {
		j := b.jobs[b.next]
		if j == nil || j.texts > 0 && !b.spool.Has(b.next) {
			return
		}
		res, err := b.spool.Take(b.next)
		if err == nil {
			err = b.write(j, res)
		}
		if err != nil {
			b.err = err
			return
		}
		delete(b.jobs, b.next)
		b.next++
	}
}

// run resumes what the results stream already holds, then reads the input
// and submits the other jobs, at most --max-inflight unanswered and at most
// the window ahead of the first unwritten one, and writes every line in
// input order as soon as the jobs before it are done. watch, when set, is
// called about every second while jobs are out, to tell a stalled run from
// a slow one.
func (b *bulk) run(ctx context.Context, in *inputReader, sum inputSummary, w, errw io.Writer, watch func(ctx context.Context, stalled time.Duration) string) error {
	var lastSeq uint64
	for sr, err := range b.c.Results(ctx, b.c.Run(), client.UntilCaughtUp()) {
		if err := b.take(sr, err); err != nil {
			return err
		}
		lastSeq = sr.Sequence
	}
	switch done := b.spool.Len(); {
	case done > 0 && sum.jobs >= 0:
		fmt.Fprintf(errw, "resuming run %s: %d of %d jobs already done\n", b.c.Run(), done, sum.jobs)
	case done > 0:
		fmt.Fprintf(errw, "resuming run %s: %d jobs already done\n", b.c.Run(), done)
	default:
		// The id `jetembed results` reads the run by, and a rerun resumes.
		fmt.Fprintf(errw, "run %s\n", b.c.Run())
	}
	out := bufio.NewWriter(w)
	b.mu.Lock()
	b.enc = json.NewEncoder(out)
	b.bar = newProgress(errw, "embedded", sum.texts)
	b.mu.Unlock()

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for sr, err := range b.c.Results(ctx, b.c.Run(), client.AfterSequence(lastSeq)) {
			if ctx.Err() != nil {
				return
			}
			if err := b.take(sr, err); err != nil {
				cancel(err)
				return
			}
		}
	}()
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		if watch != nil {
			b.watch(ctx, watch)
		}
	}()
	err := b.submitAll(ctx, in)
	if err == nil {
		err = b.waitFor(ctx, func() bool { return len(b.jobs) == 0 })
	}
	cancel(nil)
	<-readerDone
	<-watchDone
	b.bar.end()
	ferr := out.Flush()
	b.mu.Lock()
	werr, failed, lines, cached := b.err, b.failed, b.lines, b.cached
	b.mu.Unlock()
	if cached > 0 {
		fmt.Fprintf(errw, "%d of %d texts came from the fleet's cache\n", cached, lines)
	}
	switch {
	case werr != nil:
		return fmt.Errorf("%w (run the same command again to resume)", werr)
	case err != nil:
		if errors.Is(err, context.Canceled) {
			return errors.New("interrupted: run the same command again to resume")
		}
		return fmt.Errorf("%w (run the same command again to resume)", err)
	case ferr != nil:
		return ferr
	}
	return linesFailed(failed, lines)
}

// watch asks watch for a status whenever no text was answered for a while
// with jobs out, and shows it on the progress line until answers resume.
func (b *bulk) watch(ctx context.Context, watch func(ctx context.Context, stalled time.Duration) string) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last, since := -1, time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		b.mu.Lock()
		answered, out := b.answered, len(b.submitted)
		b.mu.Unlock()
		if answered != last || out == 0 {
			last, since = answered, time.Now()
			b.bar.setStatus(watch(ctx, 0))
			continue
		}
		b.bar.setStatus(watch(ctx, time.Since(since)))
	}
}

// submitAll reads the input job by job and submits every job the results
// stream does not answer already.
func (b *bulk) submitAll(ctx context.Context, in *inputReader) error {
	for k := 0; ; k++ {
		j, texts, err := b.cut.next(in)
		if err != nil {
			return err
		}
		if len(j.lines) == 0 {
			return nil
		}
		if err := b.waitFor(ctx, func() bool { return k-b.next < b.window }); err != nil {
			return err
		}
		b.mu.Lock()
		b.jobs[k] = j
		resumed := b.spool.Has(k)
		if resumed || j.texts == 0 {
			b.bar.skip(j.texts)
			b.flush()
		}
		b.mu.Unlock()
		if resumed || j.texts == 0 {
			continue
		}
		if err := b.waitFor(ctx, func() bool { return len(b.submitted) < *b.f.maxInFlight }); err != nil {
			return err
		}
		b.mu.Lock()
		// Its result may be in already: an earlier run submitted it and it
		// was stored after the resume read the stream.
		answered := b.spool.Has(k) || k < b.next
		if !answered {
			b.submitted[k] = true
		}
		b.mu.Unlock()
		if answered {
			continue
		}
		if _, err := b.c.Submit(ctx, b.job(k, j, texts)); err != nil {
			return err
		}
	}
}

// waitFor waits until cond (called with b.mu held) is true, a write failed
// or ctx ends.
func (b *bulk) waitFor(ctx context.Context, cond func() bool) error {
	for {
		b.mu.Lock()
		ok, err := cond(), b.err
		b.mu.Unlock()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-b.changed:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// job is job k of the run. Its meta names the input lines it covers
// ("lines": the ids of its texts' lines; "failed": lines that failed
// before submission, with their error), so that `jetembed results` can
// write the run without its input.
func (b *bulk) job(k int, j *bulkJob, texts []string) *schema.Job {
	sj := &schema.Job{V: schema.Version, ID: b.prefix + strconv.Itoa(k), Outputs: b.outs, Texts: texts, Meta: jobMeta(j)}
	if *b.f.noTruncate {
		no := false
		sj.Truncate = &no
	}
	return sj
}

// write writes one line per input line of j: its item, the job's error, or
// the line's own error. b.mu held.
func (b *bulk) write(j *bulkJob, res *schema.Result) error {
	lines, failed, err := writeJobLines(b.enc, j, res)
	if res != nil {
		b.cached += res.Usage.Cached
	}
	b.lines += lines
	b.failed += failed
	return err
}

// writeJobLines writes the output lines of job j from its result (nil when
// it has none), returning how many lines it wrote and how many failed.
func writeJobLines(enc *json.Encoder, j *bulkJob, res *schema.Result) (lines, failed int, err error) {
	k := 0
	model := ""
	if res != nil {
		model = res.Model
	}
	for _, l := range j.lines {
		var it schema.Item
		switch {
		case l.err != nil:
			it.Error = l.err
		case res != nil && res.Error != nil:
			it.Error = res.Error
		case res != nil && k < len(res.Items):
			it = res.Items[k]
			k++
		default:
			n := 0
			if res != nil {
				n = len(res.Items)
			}
			it.Error = schema.Errorf(schema.CodeInternal, "result has %d items for %d texts", n, j.texts)
		}
		if it.Error != nil {
			failed++
		}
		if err := enc.Encode(newOutputLine(l.id, model, it)); err != nil {
			return lines, failed, fmt.Errorf("write result: %w", err)
		}
		lines++
	}
	return lines, failed, nil
}
