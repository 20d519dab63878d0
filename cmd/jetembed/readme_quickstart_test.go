package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jetembed/jetembed/internal/natstest"
)

// quickStartCommands returns the shell commands of the README's Quick
// start, one list per QUICKSTART region (indented lines between the
// markers, continuations joined).
func quickStartCommands(t *testing.T) [][]string {
	t.Helper()
	b, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	regions := regexp.MustCompile(`(?s)<!-- BEGIN QUICKSTART -->(.*?)<!-- END QUICKSTART -->`).FindAllSubmatch(b, -1)
	if regions == nil {
		t.Fatal("README has no QUICKSTART markers")
	}
	var all [][]string
	for _, m := range regions {
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
		all = append(all, cmds)
	}
	return all
}

// TestReadmeQuickStart runs the Quick start's commands as written, in a
// directory laid out like a checkout after `make deps` and `make build`
// (.deps/bin/nats, bin/jetembed, testdata), against one `jetembed dev`
// started once, as a newcomer's would be: the NATS commands, then the
// HTTP call. Only the server addresses come from the environment (NATS_URL
// for the nats CLI, JETEMBED_NATS for jetembed, a .curlrc's connect-to for
// curl's 127.0.0.1:8081), since the test cannot take the default ports.
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
	regions := quickStartCommands(t)
	if len(regions) != 2 || len(regions[0]) < 5 || len(regions[1]) != 1 || !strings.HasPrefix(regions[1][0], "curl ") {
		t.Fatalf("quick start: want the NATS commands (5 or more) and then one curl command: %q", regions)
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

	d := serveDev(t, model, "--log-format", "json", "--http-api", "127.0.0.1:0")
	var api string
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if api = logValue(d.errOut.String(), "http api listening", "addr"); api == "" {
			return errors.New("no HTTP API address logged yet")
		}
		return nil
	})
	env := append(os.Environ(), "NATS_URL="+d.url, "JETEMBED_NATS="+d.url,
		"XDG_CONFIG_HOME="+t.TempDir(), "HOME="+t.TempDir(), "PATH=/usr/bin:/bin")
	runScript := func(script string) (stdout, stderr string) {
		t.Helper()
		sctx, scancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer scancel()
		cmd := exec.CommandContext(sctx, bash, "-c", script)
		cmd.Dir = dir
		cmd.WaitDelay = 5 * time.Second // a background command left running must not hang the test
		cmd.Env = env
		var o, e strings.Builder
		cmd.Stdout, cmd.Stderr = &o, &e
		if err := cmd.Run(); err != nil {
			t.Fatalf("quick start failed: %v\nscript:\n%s\nstdout:\n%s\nstderr:\n%s", err, script, o.String(), e.String())
		}
		return o.String(), e.String()
	}

	script := "set -euo pipefail\n" + strings.Join(regions[0], "\n") + "\nsleep 0.5\nkill $(jobs -p) 2>/dev/null || true\n"
	out, errOut := runScript(script)
	if strings.Contains(errOut, "No responders") || strings.Count(out, `"dense":[`) < 2 {
		t.Errorf("nats req or nats sub printed no vector:\nstdout:\n%s\nstderr:\n%s", out, errOut)
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

	// Then the HTTP call, to the same server, as an OpenAI client makes it.
	if _, err := exec.LookPath("curl"); err != nil {
		t.Log("no curl: the Quick start's HTTP command was not run")
		return
	}
	env = append(env, curlHome(t, api))
	out, errOut = runScript("set -euo pipefail\n" + regions[1][0] + "\n")
	var res struct {
		Object string `json:"object"`
		Data   []struct {
			Object    string    `json:"object"`
			Index     int       `json:"index"`
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
		Model string `json:"model"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Object != "list" || len(res.Data) != 2 ||
		!strings.HasPrefix(res.Model, "bge-m3@") || res.Usage.PromptTokens < 4 {
		t.Fatalf("curl printed (%v):\n%s\nstderr:\n%s", err, out, errOut)
	}
	for i, it := range res.Data {
		if it.Object != "embedding" || it.Index != i || len(it.Embedding) != 32 {
			t.Errorf("data[%d]: object %q, index %d, %d values; want an embedding of the tiny model's 32", i, it.Object, it.Index, len(it.Embedding))
		}
	}
}
