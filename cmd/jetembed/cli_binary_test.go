package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// buildJetembed builds the real binary (go build, as make build does)
// into a temporary directory.
func buildJetembed(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	bin := filepath.Join(t.TempDir(), "jetembed")
	if out, err := exec.Command(goBin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// runBinary runs the binary with args and no JETEMBED_* variable but the
// ONNX Runtime library's, and returns its exit status and output.
func runBinary(t *testing.T, bin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "JETEMBED_") || strings.HasPrefix(kv, "JETEMBED_ORT_LIB=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.WaitDelay = 5 * time.Second
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("jetembed %q did not exit:\n%s%s", args, o.String(), e.String())
	}
	return cmd.ProcessState.ExitCode(), o.String(), e.String()
}

// TestBusyListenersThroughBinary is issue 34's first point: every
// listener of serve, dev and gateway whose address is taken fails the
// real binary at start with one line naming the flag and the address and
// exit status 69, never a panic (a busy --http used to panic: the
// health server's stop function stayed nil).
func TestBusyListenersThroughBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds jetembed")
	}
	bin := buildJetembed(t)
	model := tinyModel(t, "tiny-hidden")
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	dev := func(args ...string) []string {
		return append([]string{"dev", "--model", model, "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "", "--http-api", ""}, args...)
	}
	for _, tc := range []struct {
		flag string
		args []string
	}{
		{"http", []string{"serve", "--model", model, "--http-api", "", "--http", addr}},
		{"http-api", []string{"serve", "--model", model, "--http", "", "--http-api", addr}},
		{"listen", dev("--listen", addr)},
		{"http", dev("--http", addr)},
		{"http-api", dev("--http-api", addr)},
		{"listen", []string{"gateway", "--http", "", "--listen", addr}},
		{"http", []string{"gateway", "--listen", "127.0.0.1:0", "--http", addr}},
	} {
		code, stdout, stderr := runBinary(t, bin, tc.args...)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		if code != exitListen || len(lines) != 1 || strings.Contains(stderr, "panic") ||
			!strings.Contains(lines[0], "--"+tc.flag+" "+addr+": address already in use") {
			t.Errorf("%s --%s busy: exit %d (want %d), stderr (want one line naming --%s %s):\n%s\nstdout:\n%s",
				tc.args[0], tc.flag, code, exitListen, tc.flag, addr, stderr, stdout)
		}
	}
}

// TestBadFlagThroughBinary: a bad flag or value prints the error naming
// the flag first, one usage line and where to look, and exits 2; an
// empty --text says so.
func TestBadFlagThroughBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds jetembed")
	}
	bin := buildJetembed(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--bogus"}, "unknown flag --bogus"},
		{[]string{"serve", "--sessions", "many"}, `invalid value "many" for flag --sessions`},
		{[]string{"dev", "--grace", "5"}, `invalid value "5" for flag --grace`},
		{[]string{"gateway", "--api-timeout"}, "flag --api-timeout needs a value"},
		{[]string{"serve", "--patience", "1s"}, "--patience was removed"},
		{[]string{"submit", "--text", ""}, "--text is empty"},
	} {
		code, stdout, stderr := runBinary(t, bin, tc.args...)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		if code != 2 || stdout != "" || len(lines) > 10 || !strings.Contains(strings.Join(lines[:min(2, len(lines))], "\n"), tc.want) ||
			!strings.Contains(stderr, "jetembed "+tc.args[0]+" --help") {
			t.Errorf("%q: exit %d (want 2), %d lines (at most 10, %q in the first two, --help named):\n%s", tc.args, code, len(lines), tc.want, stderr)
		}
	}
	// --help lists at most 40 flags; --help-all every one.
	_, _, help := runBinary(t, bin, "serve", "--help")
	_, _, all := runBinary(t, bin, "serve", "--help-all")
	if n, m := len(parseUsage(help)), len(parseUsage(all)); n > 40 || m <= n || !strings.Contains(help, "--help-all") {
		t.Errorf("serve --help lists %d flags (at most 40), --help-all %d:\n%s", n, m, help)
	}
}
