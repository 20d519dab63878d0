package telemetry

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/term"
)

// The log formats of [NewLogger].
const (
	LogAuto = "auto"
	LogJSON = "json"
	LogText = "text"
)

// NewLogger returns a logger writing to w at level. format is LogJSON,
// LogText, or LogAuto (also the meaning of "" and of any unknown value):
// text when w is a terminal, for people, and JSON otherwise, for the log
// collector of a container runtime.
func NewLogger(w io.Writer, level slog.Level, format string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if useText(w, format) {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

func useText(w io.Writer, format string) bool {
	switch strings.ToLower(format) {
	case LogText:
		return true
	case LogJSON:
		return false
	}
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}

// HeartbeatStats is a snapshot for [Heartbeat]. Texts and Tokens are running
// totals since start; Heartbeat turns them into rates.
type HeartbeatStats struct {
	Texts, Tokens uint64
	// Jobs is the running total of jobs finished, for the log line only.
	Jobs uint64
	// Pending is the consumer's backlog (undelivered messages).
	Pending uint64
	// InFlight counts jobs fetched and not yet ACKed, NAKed or terminated.
	InFlight int
}

// Heartbeat logs one line at Info every period until ctx is done: throughput
// over the last period (texts/s, tokens/s), totals, backlog and the process
// resident memory, so a log alone shows whether a consumer is alive, busy and
// growing. Run it in its own goroutine; it returns when ctx is done.
func Heartbeat(ctx context.Context, logger *slog.Logger, every time.Duration, stats func() HeartbeatStats) {
	t := time.NewTicker(every)
	defer t.Stop()
	last, lastAt := stats(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s := stats()
			secs := now.Sub(lastAt).Seconds()
			attrs := []slog.Attr{
				slog.Float64("texts_per_s", rate(s.Texts, last.Texts, secs)),
				slog.Float64("tokens_per_s", rate(s.Tokens, last.Tokens, secs)),
				slog.Uint64("jobs", s.Jobs),
				slog.Uint64("texts", s.Texts),
				slog.Uint64("pending", s.Pending),
				slog.Int("in_flight", s.InFlight),
			}
			if rss, err := ProcessRSS(); err == nil {
				attrs = append(attrs, slog.Uint64("rss_bytes", rss))
			}
			logger.LogAttrs(ctx, slog.LevelInfo, "heartbeat", attrs...)
			last, lastAt = s, now
		}
	}
}

// rate is the per-second increase, rounded to 0.1; a total that went down
// (a counter reset) reads as zero rather than as a huge number.
func rate(now, before uint64, secs float64) float64 {
	if now < before || secs <= 0 {
		return 0
	}
	return float64(int64(float64(now-before)/secs*10+0.5)) / 10
}

// ErrNoRSS is returned by [ProcessRSS] where /proc/self/status has no VmRSS
// line (not Linux, or a restricted /proc).
var ErrNoRSS = errors.New("telemetry: resident set size not available")

// ProcessRSS returns the resident set size of this process in bytes, from
// /proc/self/status.
func ProcessRSS() (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrNoRSS, err)
	}
	defer f.Close()
	return parseVmRSS(f)
}

// parseVmRSS reads the "VmRSS:  123456 kB" line of a /proc/<pid>/status.
func parseVmRSS(r io.Reader) (uint64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("%w: malformed line %q", ErrNoRSS, sc.Text())
		}
		kb, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", ErrNoRSS, err)
		}
		return kb * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrNoRSS, err)
	}
	return 0, ErrNoRSS
}
