//go:build cgo

package ort

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jetembed/jetembed/internal/testkit"
)

// envTelemetryHelper makes TestTelemetryOff the child process that loads
// the library and runs a session.
const envTelemetryHelper = "JETEMBED_TEST_ORT_TELEMETRY_HELPER"

// TestTelemetryOff is reproduction 5 of issue 21: a process that creates
// the ONNX Runtime environment and runs a model writes nothing of ORT's
// telemetry, on a fresh HOME, whatever ORT_DISABLE_TELEMETRY held. Before
// the fix each process wrote
// $HOME/.cache/Microsoft/DeveloperTools/.onnxruntime/{deviceid,onnxruntime.db}
// and $TMPDIR/mat-debug-<pid>.log (and .ses); the C API's
// DisableTelemetryEvents alone does not stop it, as the library starts
// its telemetry when the environment is created.
func TestTelemetryOff(t *testing.T) {
	if os.Getenv(envTelemetryHelper) != "" {
		sess, _ := openDir(t, testdataModel("tiny-hidden"), Provider{IntraOpThreads: 1})
		if _, err := sess.Run(context.Background(), input(1, 4, []int{4})); err != nil {
			t.Fatal(err)
		}
		return
	}
	initORT(t) // skips without the library
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"unset", nil},
		{"asked-on", []string{EnvTelemetryOff + "=0"}},
		{"xdg-cache", []string{"XDG_CACHE_HOME=" + t.TempDir()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home, tmp := t.TempDir(), t.TempDir()
			env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
				for _, k := range []string{"HOME=", "TMPDIR=", "XDG_CACHE_HOME=", EnvTelemetryOff + "="} {
					if strings.HasPrefix(kv, k) {
						return true
					}
				}
				return false
			})
			env = append(env, "HOME="+home, "TMPDIR="+tmp, envTelemetryHelper+"=1")
			env = append(env, tc.env...)
			cmd := exec.Command(os.Args[0], "-test.run=^TestTelemetryOff$", "-test.count=1")
			cmd.Env = env
			before := testkit.SnapshotFiles("/tmp/mat-debug-*.log") // other processes' (a pid is reused)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "PASS") {
				t.Fatalf("helper: %v\n%s", err, out)
			}
			dirs := []string{home, tmp}
			for _, kv := range tc.env {
				if v, ok := strings.CutPrefix(kv, "XDG_CACHE_HOME="); ok {
					dirs = append(dirs, v)
				}
			}
			for _, dir := range dirs {
				if files := filesUnder(t, dir); len(files) > 0 {
					t.Errorf("written under %s: %s", dir, strings.Join(files, ", "))
				}
			}
			if before.Written(fmt.Sprintf("/tmp/mat-debug-%d.log", cmd.Process.Pid)) {
				t.Errorf("/tmp/mat-debug-%d.log written", cmd.Process.Pid)
			}
		})
	}
}

// filesUnder lists every file and directory below dir, relative to it.
func filesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
