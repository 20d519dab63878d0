package main

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jetembed/jetembed/internal/natstest"
)

// TestProgressPlainLines: off a terminal the report is plain lines, the
// first soon after the start (before any text is done), with the total and
// an ETA once texts are done; a status shows at once; the last line counts
// only what was done, never the total of a run that stopped short.
func TestProgressPlainLines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer func(f, e time.Duration) { progressFirst, progressEvery = f, e }(progressFirst, progressEvery)
		progressFirst, progressEvery = 10*time.Millisecond, 20*time.Millisecond
		var buf lockedBuffer
		p := newProgress(&buf, "embedded", 100)
		natstest.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
			if !strings.Contains(buf.String(), "embedded 0 of 100 texts (0%)") {
				return errFirstLine
			}
			return nil
		})
		p.add(40)
		natstest.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
			if !strings.Contains(buf.String(), "embedded 40 of 100 texts (40%)") || !strings.Contains(buf.String(), "ETA") {
				return errFirstLine
			}
			return nil
		})
		p.setStatus("waiting for a consumer on EMBED_JOBS/embedder (3 jobs queued)")
		if !strings.Contains(buf.String(), "— waiting for a consumer") {
			t.Errorf("status not shown at once:\n%s", buf.String())
		}
		p.end()
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if last := lines[len(lines)-1]; !strings.HasPrefix(last, "embedded 40 of 100 texts in ") {
			t.Errorf("last line %q, want the 40 texts done", last)
		}
		n := len(buf.String())
		time.Sleep(time.Minute) // the bubble's clock: thousands of ticks, no real time
		synctest.Wait()
		if len(buf.String()) != n {
			t.Error("lines printed after end")
		}
	})
}

var errFirstLine = errors.New("not there yet")
