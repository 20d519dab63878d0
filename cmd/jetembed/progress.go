package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress reports how many texts of a run are done, counting only texts
// whose result is in hand. On a terminal it is a bar with the rate and the
// ETA; elsewhere (a log file, CI) a plain line, the first after
// progressFirst and then every progressEvery. A status (reconnecting,
// waiting for a consumer) shows beside the count until it is cleared. The
// last line says truthfully how far the run got, whether it finished or
// not.
type progress struct {
	w            io.Writer
	what         string // the verb of the count: "embedded"
	start        time.Time
	first, every time.Duration

	mu     sync.Mutex
	total  int // -1: unknown (stdin)
	done   int
	status string
	pb     *progressbar.ProgressBar
	stop   chan struct{}
	ended  bool
}

// Plain-line cadence off a terminal; tests shorten them.
var (
	progressFirst = time.Second
	progressEvery = 10 * time.Second
)

// newProgress starts the report of a run of total texts (-1: unknown).
func newProgress(w io.Writer, what string, total int) *progress {
	p := &progress{w: w, what: what, start: time.Now(), first: progressFirst, every: progressEvery, total: total, stop: make(chan struct{})}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.pb = progressbar.NewOptions(max(total, -1),
			progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(what),
			progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("texts"),
			progressbar.OptionSetPredictTime(true), progressbar.OptionThrottle(100*time.Millisecond))
		_ = p.pb.RenderBlank()
		return p
	}
	go p.plain()
	return p
}

func (p *progress) plain() {
	t := time.NewTimer(p.first)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		if p.ended { // a tick that raced end: its line would follow the last
			p.mu.Unlock()
			return
		}
		fmt.Fprintln(p.w, p.lineLocked())
		p.mu.Unlock()
		t.Reset(p.every)
	}
}

// lineLocked is the plain report: count, share, rate, ETA and status.
func (p *progress) lineLocked() string {
	el := time.Since(p.start)
	rate := float64(p.done) / max(el.Seconds(), 1e-3)
	s := fmt.Sprintf("%s %d", p.what, p.done)
	if p.total >= 0 {
		s += fmt.Sprintf(" of %d texts (%.0f%%)", p.total, 100*float64(p.done)/float64(max(p.total, 1)))
	} else {
		s += " texts"
	}
	s += fmt.Sprintf(", %.0f texts/s", rate)
	if p.total > p.done && p.done > 0 {
		eta := time.Duration(float64(p.total-p.done) / rate * float64(time.Second))
		s += ", ETA " + eta.Round(time.Second).String()
	}
	if p.status != "" {
		s += " — " + p.status
	}
	return s
}

// add counts n texts done.
func (p *progress) add(n int) {
	if p == nil || n == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	if p.pb != nil {
		_ = p.pb.Add(n)
	}
}

// skip takes n texts done by an earlier run out of the total, so that the
// rate and the ETA are this run's.
func (p *progress) skip(n int) {
	if p == nil || n <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.total >= n {
		p.total -= n
		if p.pb != nil {
			p.pb.ChangeMax(p.total)
		}
	}
}

// setStatus shows s beside the count ("" clears it); off a terminal a
// change is printed at once.
func (p *progress) setStatus(s string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.status == s || p.ended {
		return
	}
	p.status = s
	if p.pb != nil {
		desc := p.what
		if s != "" {
			desc += " (" + s + ")"
		}
		p.pb.Describe(desc)
		return
	}
	if s != "" {
		fmt.Fprintln(p.w, p.lineLocked())
	}
}

// end stops the report with its final line: what was done, in how long.
func (p *progress) end() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return
	}
	p.ended = true
	close(p.stop)
	if p.pb != nil {
		// Not Finish: that would draw 100% for a run that stopped short.
		_ = p.pb.Exit()
	}
	p.status = ""
	s := fmt.Sprintf("%s %d", p.what, p.done)
	if p.total >= 0 {
		s += fmt.Sprintf(" of %d", p.total)
	}
	fmt.Fprintf(p.w, "%s texts in %v\n", s, time.Since(p.start).Round(time.Millisecond))
}
