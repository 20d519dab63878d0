package faults

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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
	t testing.TB
	*testkit.Proc
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
	p := &serveProc{t: t, Proc: testkit.StartProc(t, exec.Command(binary(t), args...))}
	t.Cleanup(func() {
		p.Stop(15 * time.Second)
		if t.Failed() {
			t.Logf("serve pid %d log (tail):\n%s", p.Cmd.Process.Pid, testkit.Tail(p.Log.String(), 40))
		}
	})
	natstest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		select {
		case <-p.Done():
			t.Fatalf("serve exited before it was ready (%v):\n%s", p.Err(), p.Log.String())
		default:
		}
		if !strings.Contains(p.Log.String(), `"msg":"ready"`) {
			return errors.New("serve not ready yet")
		}
		return nil
	})
	return p
}
