package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// bar is submit's progress bar on a terminal: texts/s and ETA. Off the
// terminal (and for a nil *bar) it does nothing.
type bar struct{ pb *progressbar.ProgressBar }

// newBar returns the bar for total texts; a negative total (stdin, read
// once) shows the rate without an ETA.
func newBar(w io.Writer, total int) *bar {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) || total == 0 {
		return &bar{}
	}
	return &bar{pb: progressbar.NewOptions(max(total, -1),
		progressbar.OptionSetWriter(w), progressbar.OptionSetDescription("embedding"),
		progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("texts"),
		progressbar.OptionSetPredictTime(true), progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }))}
}

// add counts n texts answered in this run.
func (b *bar) add(n int) {
	if b != nil && b.pb != nil {
		_ = b.pb.Add(n)
	}
}

// skip takes n texts answered by an earlier run out of the total, so that
// the rate and the ETA are this run's.
func (b *bar) skip(n int) {
	if b != nil && b.pb != nil && n > 0 && b.pb.GetMax() > 0 {
		b.pb.ChangeMax(b.pb.GetMax() - n)
	}
}

func (b *bar) finish() {
	if b != nil && b.pb != nil {
		_ = b.pb.Finish()
	}
}
