//go:build unix

package heads

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time this process has used. Benchmarks report
// tokens per CPU second beside tokens per second: on a shared machine the
// wall clock also counts the time other processes held the core.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
