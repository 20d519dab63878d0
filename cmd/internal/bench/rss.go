package bench

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// rss reads one memory field of /proc/self/status (VmRSS, VmHWM) in bytes;
// 0 when it cannot be read (not Linux).
func rss(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		name, rest, ok := strings.Cut(s.Text(), ":")
		if !ok || name != field {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}

// resetPeakRSS resets VmHWM to the current RSS (Linux 4.0 and later), so
// that the next read is the peak of what runs in between.
func resetPeakRSS() {
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// cpuTime is the process's user and system CPU time so far (zero where
// getrusage fails).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
