package faults

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/internal/testkit"
)

// The jetembed binary is built once per test binary, on first use, so that
// `go test -run` of a test that needs no process builds nothing.
var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	binDir    string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binary returns the path of a freshly built jetembed, skipping the test when
// ONNX Runtime is not configured (the serve process needs it).
func binary(t testing.TB) string {
	t.Helper()
	if os.Getenv("JETEMBED_ORT_LIB") == "" {
		t.Skip("JETEMBED_ORT_LIB not set; run `make test` or `make deps`")
	}
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "jetembed-faults-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "jetembed")
		cmd := exec.Command("go", "build", "-o", binPath, "../cmd/jetembed")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// tinyModel is the committed BGE-M3-shaped test model.
func tinyModel(t testing.TB) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "testdata", "models", "tiny-hidden"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// serveProc is `jetembed serve` running as a child process.
type serveProc struct {
	t    testing.TB
	cmd  *exec.Cmd
	log  *testkit.Buffer
	done chan struct{}
	err  error // the exit status, once done is closed
}

// baseServeArgs are the serve flags every fault test shares: the tiny model on
// one thread, no warm-up or probe (they only cost start-up time here), JSON
// logs to read the ready line, and no HTTP listener. Provisioning is the
// test's job, so that jobs can be queued before any consumer runs.
func baseServeArgs(t testing.TB, url string) []string {
	return []string{"serve", "--nats", url, "--model", tinyModel(t), "--threads", "1",
		"--warmup-batches", "", "--probe=false", "--heartbeat", "0", "--log-format", "json",
		"--http", "", "--provision=off", "--grace", "5s"}
}

// startServe starts serve with args after the binary name and waits until it
// logs that it is ready. The process is killed at cleanup if still running.
func startServe(t testing.TB, args ...string) *serveProc {
	t.Helper()
	p := &serveProc{t: t, log: &testkit.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(binary(t), args...)
	p.cmd.Stdout = p.log
	p.cmd.Stderr = p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			p.Kill()
		}
		if t.Failed() {
			t.Logf("serve pid %d log (tail):\n%s", p.cmd.Process.Pid, tail(p.log.String(), 40))
		}
	})
	natstest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		select {
		case <-p.done:
			t.Fatalf("serve exited before it was ready (%v):\n%s", p.err, p.log.String())
		default:
		}
		if !strings.Contains(p.log.String(), `"msg":"ready"`) {
			return errors.New("serve not ready yet")
		}
		return nil
	})
	return p
}

func (p *serveProc) signal(sig syscall.Signal) {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(sig)
	}
}

// Kill ends the process with SIGKILL, as a crash or the OOM killer would,
// and waits for it.
func (p *serveProc) Kill() {
	p.signal(syscall.SIGKILL)
	<-p.done
}

// Running reports whether the process has not exited.
func (p *serveProc) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
