package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"
)

// autoMemoryShare is the part of the host's available memory the default
// --memory-budget gives the sessions' workspaces: the rest stays for the
// model, the results in flight and everything else on the host.
const autoMemoryShare = 0.5

// memoryBudget resolves --memory-budget: "auto" (half the memory
// available to this process on a CPU provider; none on GPU providers,
// whose workspace is device memory capped by --gpu-mem-limit), "off", or
// a size with units ("2GiB", "1500MB", "1073741824"). note says how it was
// chosen, for the start-up log.
func memoryBudget(flag string, cpu bool) (budget int64, note string, err error) {
	switch strings.ToLower(strings.TrimSpace(flag)) {
	case "off", "none", "0":
		return 0, "off", nil
	case "auto", "":
		if !cpu {
			return 0, "off (auto on a GPU provider: cap device memory with --gpu-mem-limit)", nil
		}
		avail, from := availableMemory()
		if avail <= 0 {
			return 0, "off (auto: available memory unknown)", nil
		}
		budget = int64(float64(avail) * autoMemoryShare)
		return budget, fmt.Sprintf("%s (auto: half of the %s available per %s)", humanize.IBytes(uint64(budget)), humanize.IBytes(uint64(avail)), from), nil
	}
	n, err := humanize.ParseBytes(flag)
	if err != nil || n == 0 || n > 1<<62 {
		return 0, "", fmt.Errorf("%w: --memory-budget %q (want auto, off or a size such as 2GiB)", errUsage, flag)
	}
	return int64(n), humanize.IBytes(n), nil
}

// availableMemory is what the kernel says this process can still use:
// MemAvailable, lowered by a cgroup v2 memory limit when there is one.
func availableMemory() (int64, string) {
	avail, from := meminfoAvailable(), "/proc/meminfo"
	if limit, ok := readInt("/sys/fs/cgroup/memory.max"); ok {
		used, _ := readInt("/sys/fs/cgroup/memory.current")
		if left := limit - used; left > 0 && (avail <= 0 || left < avail) {
			avail, from = left, "the cgroup limit"
		}
	}
	return avail, from
}

func meminfoAvailable() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemAvailable:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// readInt reads a file holding one integer ("max" is no integer).
func readInt(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}
