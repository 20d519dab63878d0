// Package mallocenv sets glibc's allocator for ONNX Runtime on CPU by
// re-executing the process with GLIBC_TUNABLES ([Reexec]), and gives the
// processes it starts the environment without them ([ChildEnv]). It
// imports nothing of the project.
package mallocenv

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
)

// Tunables set glibc's allocator for ONNX Runtime on CPU. ORT
// allocates every intermediate tensor with malloc; on long texts those are
// the attention scores (heads x S^2 floats), far above glibc's mmap
// threshold, so by default each is a fresh mmap that the run faults in page
// by page and munmaps when the next node has consumed it: 8.3 million page
// faults and ~12% of the CPU time on the bench's mixed corpus. With one
// arena, no mmap for large blocks and a 2 GiB trim threshold, a run reuses
// the memory the previous node and the previous run freed: the faults are
// those of the peak working set only (1.3 million). The price is a peak
// RSS up to ~15% higher (freed memory stays for the next run); engine/ort
// returns the free memory to the kernel once the sessions have been idle
// for a second (malloc_trim).
const Tunables = "glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=2147483648"

// TunedEnv marks a process re-executed with [Tunables]; the processes it
// starts itself (the bench's transformers.js peer) get the environment
// without them.
const TunedEnv = "JETEMBED_MALLOC_TUNED"

// Mode says which allocator settings this process runs with, for its
// start-up log: "tuned" ([Tunables], set by [Reexec]), "operator" (a
// GLIBC_TUNABLES given from outside) or "system" (glibc's defaults).
func Mode() string {
	switch v, set := os.LookupEnv("GLIBC_TUNABLES"); {
	case os.Getenv(TunedEnv) != "" && v == Tunables:
		return "tuned"
	case set:
		return "operator"
	}
	return "system"
}

// Reexec re-executes this process with [Tunables] on Linux, unless
// GLIBC_TUNABLES is set at all (the operator's choice stands, even an
// empty one), JETEMBED_MALLOC=system, or the process was started through
// the dynamic loader (ld-linux ... jetembed: the executable is then the
// loader). glibc reads the tunables only at process start, hence the
// exec; it keeps the PID, the arguments and the rest of the environment,
// and returns only when it did not exec (then the process goes on as it
// is: [Mode] says so). Call it first thing in main, for the commands that
// run the engine on CPU. On musl or another libc the variable is ignored.
func Reexec() {
	if runtime.GOOS != "linux" || os.Getenv("JETEMBED_MALLOC") == "system" || os.Getenv(TunedEnv) != "" {
		return
	}
	if _, set := os.LookupEnv("GLIBC_TUNABLES"); set {
		return
	}
	exe, err := os.Executable()
	if err != nil || strings.HasPrefix(filepath.Base(exe), "ld-") {
		return
	}
	env := append(os.Environ(), "GLIBC_TUNABLES="+Tunables, TunedEnv+"=1")
	_ = syscall.Exec(exe, os.Args, env)
}

// ChildEnv is the environment for a process this one starts: without the
// malloc tunables [Reexec] added to its own, nor its marker (so that a
// jetembed started from here tunes itself again).
func ChildEnv() []string {
	env := os.Environ()
	if os.Getenv(TunedEnv) == "" {
		return env
	}
	out := env[:0:0]
	for _, kv := range env {
		if strings.HasPrefix(kv, "GLIBC_TUNABLES=") || strings.HasPrefix(kv, TunedEnv+"=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}
