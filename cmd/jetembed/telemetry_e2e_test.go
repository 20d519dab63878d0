package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/internal/testkit"
)

// envTelemetryArgs, when set, makes TestTelemetryHelperProcess run runMain
// with these arguments (separated by newlines), stopping on SIGTERM as
// main does, and exit.
const envTelemetryArgs = "JETEMBED_TEST_TELEMETRY_ARGS"

// TestTelemetryHelperProcess is not a test: it is the child process of
// TestNoORTTelemetry.
func TestTelemetryHelperProcess(t *testing.T) {
	args := os.Getenv(envTelemetryArgs)
	if args == "" {
		t.Skip("helper process only")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(runMain(ctx, strings.Split(args, "\n"), stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr}))
}

// TestNoORTTelemetry is reproduction 5 of issue 21 for every command that
// loads ONNX Runtime: each runs as its own process on a fresh HOME and
// TMPDIR and writes nothing of ORT's telemetry there ($HOME/.cache/Microsoft,
// $TMPDIR/mat-debug-<pid>.log and .ses; nor /tmp/mat-debug-<pid>.log).
// The long-running ones (serve, dev) are stopped with SIGTERM once ready.
func TestNoORTTelemetry(t *testing.T) {
	if testing.Short() {
		t.Skip("five real processes")
	}
	model, err := filepath.Abs(tinyModel(t, "tiny-hidden"))
	if err != nil {
		t.Fatal(err)
	}
	srv := natstest.RunServer(t)
	quick := []string{"--model", model, "--threads", "1"}
	for _, tc := range []struct {
		name  string
		args  []string
		stdin string
		ready string // a log line of a long-running command once it is up
	}{
		{"embed", append([]string{"embed"}, quick...), `{"text":"hello"}` + "\n", ""},
		{"warmup", append([]string{"warmup", "--warmup-batches", "1", "--warmup-seqs", "8", "--probe=false"}, quick...), "", ""},
		{"serve", append([]string{"serve", "--nats", srv.ClientURL(), "--warmup-batches", "", "--probe=false", "--heartbeat", "0",
			"--http", "", "--provision=create", "--log-format", "json"}, quick...), "", `"msg":"ready"`},
		{"dev", append([]string{"dev", "--listen", "127.0.0.1:0", "--data", "", "--warmup-batches", "", "--probe=false",
			"--http", "", "--http-api", "", "--log-format", "json"}, quick...), "", `"msg":"ready"`},
		{"bench", []string{"bench", "--model", model, "--texts", "20", "--requests", "3", "--peer-texts", "0", "--threads", "1"}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home, tmp := t.TempDir(), t.TempDir()
			for i, a := range tc.args {
				if a == "--data" {
					tc.args[i+1] = filepath.Join(t.TempDir(), "data")
				}
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestTelemetryHelperProcess$", "-test.count=1")
			cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
				for _, k := range []string{"HOME=", "TMPDIR=", "XDG_CACHE_HOME=", "ORT_DISABLE_TELEMETRY="} {
					if strings.HasPrefix(kv, k) {
						return true
					}
				}
				return false
			}), "HOME="+home, "TMPDIR="+tmp, envTelemetryArgs+"="+strings.Join(tc.args, "\n"))
			cmd.Dir = tmp
			cmd.Stdin = strings.NewReader(tc.stdin)
			log := &testkit.Buffer{}
			cmd.Stdout, cmd.Stderr = log, log
			before := testkit.SnapshotFiles("/tmp/mat-debug-*.log") // other processes' (a pid is reused)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			if tc.ready != "" {
				natstest.CheckFor(t, 60*time.Second, 20*time.Millisecond, func() error {
					if !strings.Contains(log.String(), tc.ready) {
						return fmt.Errorf("%s not ready", tc.name)
					}
					return nil
				})
				_ = cmd.Process.Signal(syscall.SIGTERM)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("%s: %v\n%s", tc.name, err, log.String())
				}
			case <-time.After(2 * time.Minute):
				_ = cmd.Process.Kill()
				t.Fatalf("%s did not end:\n%s", tc.name, log.String())
			}
			var written []string
			for _, dir := range []string{home, tmp} {
				_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
					if err != nil || p == dir {
						return err
					}
					name := d.Name()
					if dir == home || strings.HasPrefix(name, "mat-debug-") || name == ".ses" || name == "Microsoft" {
						written = append(written, p)
					}
					return nil
				})
			}
			if before.Written(fmt.Sprintf("/tmp/mat-debug-%d.log", cmd.Process.Pid)) {
				written = append(written, fmt.Sprintf("/tmp/mat-debug-%d.log", cmd.Process.Pid))
			}
			if len(written) > 0 {
				t.Errorf("%s wrote %s", tc.name, strings.Join(written, ", "))
			}
		})
	}
}
