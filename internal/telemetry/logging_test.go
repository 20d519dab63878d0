package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jetembed/jetembed/internal/testkit"
)

// openPTY returns the terminal side of a new pseudo-terminal, or skips.
func openPTY(t *testing.T) *os.File {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	fd := int(ptmx.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Skipf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Skipf("ptsname: %v", err)
	}
	tty, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("open pts: %v", err)
	}
	t.Cleanup(func() { tty.Close() })
	return tty
}

func TestNewLoggerFormat(t *testing.T) {
	pipeR, pipeW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pipeR.Close()
	defer pipeW.Close()
	tty := openPTY(t)

	tests := []struct {
		name   string
		w      io.Writer
		format string
		text   bool
	}{
		{"buffer auto", &bytes.Buffer{}, LogAuto, false},
		{"buffer empty format", &bytes.Buffer{}, "", false},
		{"buffer text", &bytes.Buffer{}, LogText, true},
		{"buffer TEXT", &bytes.Buffer{}, "TEXT", true},
		{"pipe auto", pipeW, LogAuto, false},
		{"terminal auto", tty, LogAuto, true},
		{"terminal json", tty, LogJSON, false},
		{"terminal unknown", tty, "yaml", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := NewLogger(tc.w, slog.LevelInfo, tc.format).Handler()
			_, isText := h.(*slog.TextHandler)
			_, isJSON := h.(*slog.JSONHandler)
			if isText != tc.text || isJSON == tc.text {
				t.Errorf("handler %T, want text=%v", h, tc.text)
			}
		})
	}
}

func TestNewLoggerLevel(t *testing.T) {
	var buf bytes.Buffer
	log := NewLogger(&buf, slog.LevelWarn, LogJSON)
	log.Info("hidden")
	log.Warn("shown", "n", 1)
	if strings.Contains(buf.String(), "hidden") {
		t.Errorf("info logged at warn level: %s", buf.String())
	}
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil || rec["msg"] != "shown" || rec["n"] != 1.0 {
		t.Errorf("warn line %q (%v)", buf.String(), err)
	}
}

func TestHeartbeat(t *testing.T) {
	var buf testkit.Buffer
	log := NewLogger(&buf, slog.LevelInfo, LogJSON)
	var texts atomic.Uint64
	stats := func() HeartbeatStats {
		// Each call is one period later: 50 texts and 5000 tokens a period.
		n := texts.Add(50)
		return HeartbeatStats{Texts: n, Tokens: n * 100, Jobs: n / 10, Pending: 321, InFlight: 2}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		Heartbeat(ctx, log, 10*time.Millisecond, stats)
		close(done)
	}()
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if n := len(buf.Lines()); n < 2 {
			return fmt.Errorf("heartbeat logged %d lines", n)
		}
		return nil
	})
	cancel()
	<-done

	lines := buf.Lines()
	var rec struct {
		Msg        string  `json:"msg"`
		TextsPerS  float64 `json:"texts_per_s"`
		TokensPerS float64 `json:"tokens_per_s"`
		Texts      uint64  `json:"texts"`
		Pending    uint64  `json:"pending"`
		InFlight   int     `json:"in_flight"`
		RSS        uint64  `json:"rss_bytes"`
	}
	if err := json.Unmarshal([]byte(lines[1]), &rec); err != nil {
		t.Fatalf("heartbeat line %q: %v", lines[1], err)
	}
	if rec.Msg != "heartbeat" || rec.Pending != 321 || rec.InFlight != 2 || rec.Texts%50 != 0 {
		t.Errorf("heartbeat line %+v", rec)
	}
	// The rate depends on scheduling, but tokens are always 100 per text.
	if rec.TextsPerS <= 0 || rec.TokensPerS/rec.TextsPerS < 99 || rec.TokensPerS/rec.TextsPerS > 101 {
		t.Errorf("rates texts/s %v tokens/s %v, want positive with ratio 100", rec.TextsPerS, rec.TokensPerS)
	}
	if _, err := os.Stat("/proc/self/status"); err == nil && rec.RSS < 1<<20 {
		t.Errorf("rss_bytes = %d, want at least 1 MiB for a Go test binary", rec.RSS)
	}
}

func TestRate(t *testing.T) {
	tests := []struct {
		now, before uint64
		secs, want  float64
	}{
		{150, 100, 2, 25},
		{100, 100, 1, 0},
		{10, 100, 1, 0}, // counter reset
		{1, 0, 3, 0.3},
		{5, 0, 0, 0},
	}
	for _, tc := range tests {
		if got := rate(tc.now, tc.before, tc.secs); got != tc.want {
			t.Errorf("rate(%d, %d, %v) = %v, want %v", tc.now, tc.before, tc.secs, got, tc.want)
		}
	}
}

func TestParseVmRSS(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		err  bool
	}{
		{"Name:\tjetembed\nVmPeak:\t  9000 kB\nVmRSS:\t   12345 kB\nThreads:\t8\n", 12345 * 1024, false},
		{"Name:\tjetembed\n", 0, true},
		{"VmRSS:\t12 MB\n", 0, true},
		{"VmRSS:\tlots kB\n", 0, true},
	}
	for _, tc := range tests {
		got, err := parseVmRSS(strings.NewReader(tc.in))
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("parseVmRSS(%q) = %d, %v; want %d, err=%v", tc.in, got, err, tc.want, tc.err)
		}
		if err != nil && !errors.Is(err, ErrNoRSS) {
			t.Errorf("parseVmRSS(%q) error %v is not ErrNoRSS", tc.in, err)
		}
	}
}
