package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// This file is the bulk half of `jetembed submit`: jobs out, results back
// in input order, resumable from the results stream.

// outputLine is one line of the output: the input's id and its item.
type outputLine struct {
	ID string `json:"id"`
	schema.Item
}

// bulkJob is one job of a bulk run: the input lines it covers.
type bulkJob struct {
	id     string
	lines  []int // indexes into in
	texts  int   // lines with a text
	result *schema.Result
	// written: its lines are out and its result freed.
	written bool
}

type bulk struct {
	in   []inputLine
	jobs []*bulkJob
	byID map[string]*bulkJob
}

func newBulk(in []inputLine, size int, run string) *bulk {
	b := &bulk{in: in, byID: map[string]*bulkJob{}}
	for start := 0; start < len(in); start += size {
		j := &bulkJob{id: fmt.Sprintf("%s-%d", run, len(b.jobs))}
		for i := start; i < min(start+size, len(in)); i++ {
			j.lines = append(j.lines, i)
			if in[i].err == nil {
				j.texts++
			}
		}
		b.jobs = append(b.jobs, j)
		b.byID[j.id] = j
	}
	return b
}

// run resumes what the results stream already holds, submits the other
// jobs with at most --max-inflight unanswered, and writes every line in
// input order as soon as the jobs before it are done.
func (b *bulk) run(ctx context.Context, c *jetstream.Client, f submitFlags, outs []schema.Output, w io.Writer, errw io.Writer, log *slog.Logger) error {
	var (
		mu      sync.Mutex
		lastSeq uint64
		done    int
	)
	for sr, err := range c.Results(ctx, c.Run(), jetstream.UntilCaughtUp()) {
		if errors.Is(err, jetstream.ErrBadResult) {
			// The job runs again; its new result will be read.
			log.Warn("stored result skipped", "err", err)
			lastSeq = sr.Sequence
			continue
		}
		if err != nil {
			return err
		}
		lastSeq = sr.Sequence
		if j := b.byID[sr.ID]; j != nil && j.result == nil {
			j.result = sr.Result
			done++
		}
	}
	total := 0
	for _, j := range b.jobs {
		if j.result == nil {
			total += j.texts
		}
	}
	if done > 0 {
		fmt.Fprintf(errw, "resuming run %s: %d of %d jobs already done\n", c.Run(), done, len(b.jobs))
	}
	bar := newBar(errw, total)
	out := bufio.NewWriter(w)
	enc := json.NewEncoder(out)
	next := 0
	// flush writes the lines of the finished jobs at the head; mu held.
	flush := func() error {
		for next < len(b.jobs) && (b.jobs[next].result != nil || b.jobs[next].texts == 0) {
			if err := b.write(enc, b.jobs[next]); err != nil {
				return err
			}
			b.jobs[next].result, b.jobs[next].written = nil, true
			next++
		}
		return nil
	}
	mu.Lock()
	err := flush()
	mu.Unlock()
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	slots := make(chan struct{}, *f.maxInFlight)
	submitted := map[string]bool{}
	allDone := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for sr, err := range c.Results(ctx, c.Run(), jetstream.AfterSequence(lastSeq)) {
			if errors.Is(err, jetstream.ErrBadResult) {
				log.Warn("result skipped", "err", err)
				continue
			}
			if err != nil {
				cancel(err)
				return
			}
			mu.Lock()
			j := b.byID[sr.ID]
			if j == nil || j.result != nil || j.written {
				mu.Unlock()
				continue
			}
			j.result = sr.Result
			if submitted[j.id] {
				delete(submitted, j.id)
				<-slots
			}
			bar.add(j.texts)
			err = flush()
			finished := next == len(b.jobs)
			mu.Unlock()
			if err != nil {
				cancel(err)
				return
			}
			if finished {
				close(allDone)
				return
			}
		}
	}()
	for _, j := range b.jobs {
		mu.Lock()
		skip := j.result != nil || j.texts == 0 || j.written
		mu.Unlock()
		if skip {
			continue
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return b.stopped(ctx, readerDone, out, bar)
		}
		mu.Lock()
		submitted[j.id] = true
		mu.Unlock()
		if _, err := c.Submit(ctx, b.job(j, outs, *f.noTruncate)); err != nil {
			cancel(err)
			return b.stopped(ctx, readerDone, out, bar)
		}
	}
	mu.Lock()
	finished := next == len(b.jobs)
	mu.Unlock()
	if !finished {
		select {
		case <-allDone:
		case <-ctx.Done():
			return b.stopped(ctx, readerDone, out, bar)
		}
	}
	cancel(nil)
	<-readerDone
	bar.finish()
	return out.Flush()
}

// stopped ends an interrupted run: what is written stays, and the error
// says how to resume.
func (b *bulk) stopped(ctx context.Context, readerDone <-chan struct{}, out *bufio.Writer, bar *bar) error {
	<-readerDone
	bar.finish()
	_ = out.Flush()
	err := context.Cause(ctx)
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("interrupted: run the same command again to resume")
	}
	return fmt.Errorf("%w (run the same command again to resume)", err)
}

func (b *bulk) job(j *bulkJob, outs []schema.Output, noTruncate bool) *schema.Job {
	sj := &schema.Job{V: schema.Version, ID: j.id, Outputs: outs}
	if noTruncate {
		no := false
		sj.Truncate = &no
	}
	for _, i := range j.lines {
		if b.in[i].err == nil {
			sj.Texts = append(sj.Texts, b.in[i].text)
		}
	}
	return sj
}

// write writes one line per input line of j: its item, the job's error, or
// the line's own error.
func (b *bulk) write(enc *json.Encoder, j *bulkJob) error {
	k := 0
	for _, i := range j.lines {
		l := b.in[i]
		line := outputLine{ID: l.id}
		switch {
		case l.err != nil:
			line.Error = l.err
		case j.result != nil && j.result.Error != nil:
			line.Error = j.result.Error
		case j.result != nil && k < len(j.result.Items):
			line.Item = j.result.Items[k]
			k++
		default:
			line.Error = schema.Errorf(schema.CodeInternal, "result of job %s has %d items for %d texts", j.id, len(j.result.Items), j.texts)
		}
		if err := enc.Encode(line); err != nil {
			return fmt.Errorf("write result: %w", err)
		}
	}
	return nil
}

// bar is the progress bar on a terminal: texts/s and ETA.
type bar struct{ pb *progressbar.ProgressBar }

func newBar(w io.Writer, total int) *bar {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) || total == 0 {
		return &bar{}
	}
	return &bar{pb: progressbar.NewOptions(total,
		progressbar.OptionSetWriter(w), progressbar.OptionSetDescription("embedding"),
		progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("texts"),
		progressbar.OptionSetPredictTime(true), progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }))}
}

func (b *bar) add(n int) {
	if b.pb != nil {
		_ = b.pb.Add(n)
	}
}

func (b *bar) finish() {
	if b.pb != nil {
		_ = b.pb.Finish()
	}
}
