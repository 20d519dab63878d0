// Package testkit holds the small helpers the tests of several packages
// share: a [Buffer] that goroutines (a logger, a child process's output
// copier) write while the test reads it, and [CheckFor], a polling wait
// instead of a sleep. Tests that need real NATS servers use
// internal/natstest, which builds on this package.
//
// Only tests import it. It imports nothing of the project and nothing
// outside the standard library, so any package's tests may use it.
package testkit

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Buffer is a [bytes.Buffer] safe for concurrent writers and a reading
// test.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines is the buffer's text cut into lines, without a trailing empty one.
func (b *Buffer) Lines() []string {
	return strings.Split(strings.TrimSpace(b.String()), "\n")
}

func (b *Buffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Reset()
}

// CheckFor calls f every interval until it returns nil, and fails the test
// with f's last error if that has not happened within total. Under
// testing/synctest the clock is the bubble's, so it waits no real time.
func CheckFor(tb testing.TB, total, every time.Duration, f func() error) {
	tb.Helper()
	deadline := time.Now().Add(total)
	var err error
	for {
		if err = f(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(every)
	}
	tb.Fatalf("condition not met after %v: %v", total, err)
}

// Deps lists the import paths pkg depends on, itself and the standard
// library included (`go list -deps`), for tests that hold a package to its
// allowed dependencies. It skips the test where no go command is on PATH.
func Deps(t testing.TB, pkg string) []string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	out, err := exec.Command(goBin, "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// Proc is a child process started by [StartProc]: its command, its
// output (stdout and stderr, as the test reads it while it runs), and its
// exit.
type Proc struct {
	Cmd  *exec.Cmd
	Log  *Buffer
	done chan struct{}
	err  error
}

// StartProc starts cmd with its stdout and stderr into the Proc's Log,
// failing the test if it cannot start. The caller stops it (a cleanup
// with [Proc.Stop]), so that it decides the grace and what to log.
func StartProc(t testing.TB, cmd *exec.Cmd) *Proc {
	t.Helper()
	p := &Proc{Cmd: cmd, Log: &Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.Log, p.Log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p
}

// Done is closed once the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the exit status, once Done is closed (nil before).
func (p *Proc) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Running reports whether the process has not exited.
func (p *Proc) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Signal sends sig to the process if it still runs.
func (p *Proc) Signal(sig os.Signal) {
	if p.Running() {
		_ = p.Cmd.Process.Signal(sig)
	}
}

// Kill ends the process with SIGKILL, as a crash or the OOM killer would,
// and waits for it.
func (p *Proc) Kill() {
	p.Signal(os.Kill)
	<-p.done
}

// Stop sends SIGTERM and waits for the exit, killing the process if it
// has not exited after grace.
func (p *Proc) Stop(grace time.Duration) {
	p.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.Kill()
	}
}

// Tail is the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Files are the files that match a glob pattern and their modification
// times, taken before a child process runs, so that a file named after
// the child (its pid) tells apart the child's writing from an older file
// of the same name, left by a process that had the pid before it.
type Files map[string]time.Time

// SnapshotFiles takes [Files] of pattern.
func SnapshotFiles(pattern string) Files {
	f := Files{}
	names, _ := filepath.Glob(pattern)
	for _, n := range names {
		if fi, err := os.Stat(n); err == nil {
			f[n] = fi.ModTime()
		}
	}
	return f
}

// Written reports whether path exists and is new since the snapshot or
// was modified since.
func (f Files) Written(path string) bool {
	fi, err := os.Stat(path)
	if err != nil {
		return false
	}
	was, ok := f[path]
	return !ok || !fi.ModTime().Equal(was)
}
