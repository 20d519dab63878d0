package main

// The memory goal of issue 13 (point 4) through a real process: `jetembed
// serve` runs as a child process (this test binary re-executed), so its
// /proc/PID/status is its own; a producer in the test floods it with
// texts of over 8k tokens. scripts/bench-memory.sh measures the same on
// `jetembed dev` with more texts for `make bench`.

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetembed/jetembed/internal/mallocenv"
	"github.com/jetembed/jetembed/internal/natstest"
)

// envHelperArgs, when set, makes TestMemoryHelperProcess run runMain with
// these arguments (separated by newlines) and exit.
const envHelperArgs = "JETEMBED_TEST_HELPER_ARGS"

// envHelperNofile, when set, is the file limit (RLIMIT_NOFILE, soft and
// hard) the helper process runs under.
const envHelperNofile = "JETEMBED_TEST_HELPER_NOFILE"

// TestMemoryHelperProcess is not a test: it is the child process of
// TestMemoryReturnsAfterLongTexts.
func TestMemoryHelperProcess(t *testing.T) {
	args := os.Getenv(envHelperArgs)
	if args == "" {
		t.Skip("helper process only")
	}
	if n, err := strconv.ParseUint(os.Getenv(envHelperNofile), 10, 64); err == nil {
		// Hard and soft: Go raises the soft limit to the hard one at start.
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
			fmt.Fprintln(os.Stderr, "setrlimit:", err)
			os.Exit(3)
		}
	}
	os.Exit(runMain(context.Background(), strings.Split(args, "\n"), stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr}))
}

// TestMemoryReturnsAfterLongTexts: on the tiny model with --memory-budget
// 2GiB, serve's peak RSS during a flood of texts over 8k tokens stays
// within the budget plus the model plus 300 MiB, and its RSS a few seconds
// after the flood is back near the idle RSS (the goal is 2x idle 20 s
// after; the test allows 3x after 2 s). It holds with glibc's defaults and
// with the malloc tunables jetembed re-executes itself with, where freed
// memory is kept for the next run and the second bound is met by the idle
// trim (engine/ort). With ONNX Runtime's CPU arena kept (--cpu-arena) the
// second bound fails: the arena keeps its high water.
func TestMemoryReturnsAfterLongTexts(t *testing.T) {
	if testing.Short() {
		t.Skip("real process under long texts")
	}
	for _, mode := range []struct {
		name string
		env  []string
	}{
		{"glibc-defaults", nil},
		{"tuned", []string{"GLIBC_TUNABLES=" + mallocenv.Tunables}},
	} {
		t.Run(mode.name, func(t *testing.T) { memoryAfterLongTexts(t, mode.env) })
	}
}

func memoryAfterLongTexts(t *testing.T, env []string) {
	model := tinyModel(t, "tiny-hidden")
	srv := natstest.RunServer(t)
	url := srv.ClientURL()
	const budget = 2 << 30
	child := startHelper(t, env, "serve", "--nats", url, "--model", model, "--threads", "1",
		"--warmup-batches", "", "--probe=false", "--heartbeat", "0", "--http", "",
		"--provision=create", "--memory-budget", "2GiB")
	dir := t.TempDir()
	submit := func(name string, texts []string) {
		t.Helper()
		in := filepath.Join(dir, name+".jsonl")
		var b strings.Builder
		for i, s := range texts {
			fmt.Fprintf(&b, "{\"id\":\"%s-%d\",\"text\":%q}\n", name, i, s)
		}
		if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		code, _, errOut := runCmd(t, context.Background(), "submit", "--nats", url, "--job-size", "1",
			"--out", filepath.Join(dir, name+".out"), in)
		if code != 0 {
			t.Fatalf("submit %s: exit %d: %s", name, code, errOut)
		}
	}
	// The first submit also waits for serve to be up (it provisions).
	natstest.CheckFor(t, 60*time.Second, 200*time.Millisecond, func() error {
		if code, _, errOut := runCmd(t, context.Background(), "submit", "--nats", url, "--text", "ready?"); code != 0 {
			return fmt.Errorf("serve not answering: %s", errOut)
		}
		return nil
	})
	submit("short", []string{"how do I reset my password?"})
	time.Sleep(time.Second)
	idle := procStatus(t, child, "VmRSS")
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", child), []byte("5"), 0); err != nil {
		t.Fatalf("reset VmHWM: %v", err)
	}
	long := make([]string, 4)
	for i := range long {
		var b strings.Builder
		for w := range 3000 {
			fmt.Fprintf(&b, "w%d%d ", w*7919%1000, i)
		}
		long[i] = b.String()
	}
	submit("long", long)
	peak := procStatus(t, child, "VmHWM")
	modelBytes := dirSize(t, model)
	limit := budget + modelBytes + 300<<20
	if peak > limit {
		t.Errorf("peak RSS %d MiB over the budget + model + 300 MiB = %d MiB", peak>>20, limit>>20)
	}
	// The engine trims the heap after a second idle (engine/ort idletrim):
	// wait for the RSS to come back, not for a guessed time. Without the
	// trim it never does (the arena keeps its high water).
	done := time.Now()
	var after int64
	natstest.CheckFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		if after = procStatus(t, child, "VmRSS"); after > 3*idle {
			return fmt.Errorf("RSS after the flood %d MiB, over 3 x the idle %d MiB", after>>20, idle>>20)
		}
		return nil
	})
	t.Logf("idle %d MiB, peak %d MiB (limit %d MiB), %d MiB %s after", idle>>20, peak>>20, limit>>20, after>>20, time.Since(done).Round(time.Millisecond))
}

// startHelper runs this test binary as `jetembed ARGS...` with env added
// to its environment and returns its pid; the process is killed at the end
// of the test.
func startHelper(t *testing.T, env []string, args ...string) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMemoryHelperProcess$")
	// The allocator settings are the mode's alone, whatever this process has.
	base := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "GLIBC_TUNABLES=") || strings.HasPrefix(kv, "JETEMBED_MALLOC")
	})
	cmd.Env = append(append(base, env...), envHelperArgs+"="+strings.Join(args, "\n"))
	log := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("serve log:\n%s", log.String())
		}
	})
	return cmd.Process.Pid
}

// procStatus reads a kB field of /proc/PID/status, in bytes.
func procStatus(t *testing.T, pid int, key string) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && k == key {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", key, pid)
	return 0
}

func dirSize(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if fi, err := os.Stat(filepath.Join(dir, e.Name())); err == nil && !fi.IsDir() {
			n += fi.Size()
		}
	}
	return n
}
