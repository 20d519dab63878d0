package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// quickStartCommands returns the shell commands of the README's Quick start
// (indented lines between the QUICKSTART markers, continuations joined).
func quickStartCommands(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)<!-- BEGIN QUICKSTART -->(.*?)<!-- END QUICKSTART -->`).FindSubmatch(b)
	if m == nil {
		t.Fatal("README has no QUICKSTART markers")
	}
	var cmds []string
	cont := false
	for _, line := range strings.Split(string(m[1]), "\n") {
		if !strings.HasPrefix(line, "    ") {
			cont = false
			continue
		}
		line = strings.TrimSpace(line)
		if cont {
			cmds[len(cmds)-1] += " " + line
		} else {
			cmds = append(cmds, line)
		}
		cont = strings.HasSuffix(line, `\`)
		if cont {
			cmds[len(cmds)-1] = strings.TrimSuffix(cmds[len(cmds)-1], `\`)
		}
	}
	return cmds
}

// TestReadmeQuickStart runs the Quick start's commands as written, in a
// directory laid out like a checkout after `make deps` and `make build`
// (.deps/bin/nats, bin/jetembed, testdata), against `jetembed dev`; only
// the server address comes from the environment (NATS_URL for the nats
// CLI, JETEMBED_NATS for jetembed), since the test cannot take port 4222.
func TestReadmeQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds jetembed and runs the Quick start")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	cli := natsCLI(t)
	model := tinyModel(t, "tiny-hidden")
	cmds := quickStartCommands(t)
	if len(cmds) < 5 {
		t.Fatalf("quick start has %d commands: %q", len(cmds), cmds)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, d := range []string{".deps/bin", "bin"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(cli, filepath.Join(dir, ".deps", "bin", "nats")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "testdata"), filepath.Join(dir, "testdata")); err != nil {
		t.Fatal(err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	build := exec.Command(goBin, "build", "-o", filepath.Join(dir, "bin", "jetembed"), ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	d := serveDev(t, model)
	ctx := context.Background()
	script := "set -euo pipefail\n" + strings.Join(cmds, "\n") + "\nsleep 0.5\nkill $(jobs -p) 2>/dev/null || true\n"
	sctx, scancel := context.WithTimeout(ctx, 60*time.Second)
	defer scancel()
	cmd := exec.CommandContext(sctx, bash, "-c", script)
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second // a background command left running must not hang the test
	cmd.Env = append(os.Environ(), "NATS_URL="+d.url, "JETEMBED_NATS="+d.url,
		"XDG_CONFIG_HOME="+t.TempDir(), "HOME="+t.TempDir(), "PATH=/usr/bin:/bin")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("quick start failed: %v\nscript:\n%s\nstdout:\n%s\nstderr:\n%s", err, script, stdout.String(), stderr.String())
	}
	out := stdout.String()
	if strings.Contains(stderr.String(), "No responders") || strings.Count(out, `"dense":[`) < 2 {
		t.Errorf("nats req or nats sub printed no vector:\nstdout:\n%s\nstderr:\n%s", out, stderr.String())
	}
	data, err := os.ReadFile(filepath.Join(dir, "out.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	checkOutputLines(t, string(data), []string{"doc-1", "doc-2", "3", "doc-4"})
	// embed's lines are the last four of stdout.
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 4 {
		t.Fatalf("stdout:\n%s", out)
	}
	checkOutputLines(t, strings.Join(lines[len(lines)-4:], "\n")+"\n", []string{"doc-1", "doc-2", "3", "doc-4"})
}
