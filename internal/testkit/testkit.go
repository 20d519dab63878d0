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
	"os/exec"
	"strings"
	"sync"
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
