package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jetembed/jetembed/internal/natstest"
)

// The pages show a few commands with what they print. The tests here run
// each of them against the bundled tiny model (or a test server) and hold
// the shown output to what the command prints, with only what varies from
// run to run masked: times, timings, server addresses, and vector values
// beyond the digits shown. Output shown for the real model only is marked
// illustrative on its page and names BAAI/bge-m3.

// shownBlock returns the first code block after the text after on page:
// an indented block (indentation removed) or a fenced one.
func shownBlock(t *testing.T, page, after string) string {
	t.Helper()
	doc := readDoc(t, page)
	i := strings.Index(doc, after)
	if i < 0 {
		t.Fatalf("%s: no %q", page, after)
	}
	lines := strings.Split(doc[i+len(after):], "\n")
	for j := 1; j < len(lines); j++ {
		l := lines[j]
		if strings.HasPrefix(l, "```") {
			var b []string
			for _, l := range lines[j+1:] {
				if strings.HasPrefix(l, "```") {
					return strings.Join(b, "\n") + "\n"
				}
				b = append(b, l)
			}
			t.Fatalf("%s: unterminated fence after %q", page, after)
		}
		if strings.HasPrefix(l, "    ") && strings.TrimSpace(lines[j-1]) == "" {
			var b []string
			for _, l := range lines[j:] {
				if !strings.HasPrefix(l, "    ") {
					break
				}
				b = append(b, l[4:])
			}
			return strings.Join(b, "\n") + "\n"
		}
	}
	t.Fatalf("%s: no code block after %q", page, after)
	return ""
}

// outputMask replaces what varies (re) with a fixed text (with) in both
// the shown and the printed output before they are compared.
type outputMask struct {
	re   *regexp.Regexp
	with string
}

// checkShown holds a command's output to the block page shows after the
// text after, line by line, with masks applied to both.
func checkShown(t *testing.T, page, after, got string, masks ...outputMask) {
	t.Helper()
	shown := shownBlock(t, page, after)
	for _, m := range masks {
		shown = m.re.ReplaceAllString(shown, m.with)
		got = m.re.ReplaceAllString(got, m.with)
	}
	if shown != got {
		t.Errorf("%s shows (after %q), masked:\n%s\nthe command prints, masked:\n%s\n%s", page, after, shown, got, lineDiff(got, shown))
	}
}

// curlHome makes curl, run with the returned variable, connect to addr
// whenever a command names the default HTTP API address 127.0.0.1:8081: a
// .curlrc's connect-to, so that a page's curl command runs as written
// against a server the test started on a free port (as NATS_URL and
// JETEMBED_NATS do for the nats CLI and jetembed).
func curlHome(t *testing.T, addr string) string {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rc := fmt.Sprintf("connect-to = \"127.0.0.1:8081:%s:%s\"\n", host, port)
	if err := os.WriteFile(filepath.Join(dir, ".curlrc"), []byte(rc), 0o644); err != nil {
		t.Fatal(err)
	}
	return "CURL_HOME=" + dir
}

// runShell runs a page's shell command as written with bash, in dir, with
// env added to the test's environment, and returns its stdout.
func runShell(t *testing.T, dir, command string, env ...string) string {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bash, "-c", "set -euo pipefail\n"+command)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", command, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// shownCommand returns the one command of the indented block after the
// text after on page (continuation lines joined).
func shownCommand(t *testing.T, page, after string) string {
	t.Helper()
	b := strings.TrimSuffix(shownBlock(t, page, after), "\n")
	return strings.ReplaceAll(b, "\\\n", "")
}

// elided turns a page's JSON with `...` elisions into JSON, each `...`
// an "..." element.
func elided(shown string) string {
	return regexp.MustCompile(`\.\.\.`).ReplaceAllString(shown, `"..."`)
}

// sameShownJSON compares a shown JSON value (elisions as "...": an array
// that ends with one shows only a prefix) with a printed one: numbers
// within tol (the shown ones are rounded), everything else exactly.
func sameShownJSON(path string, shown, got any, tol float64) error {
	switch s := shown.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: printed %v, shown an object", path, got)
		}
		if len(g) != len(s) {
			return fmt.Errorf("%s: printed %d keys, shown %d", path, len(g), len(s))
		}
		for k, v := range s {
			if _, ok := g[k]; !ok {
				return fmt.Errorf("%s: printed no %q", path, k)
			}
			if err := sameShownJSON(path+"."+k, v, g[k], tol); err != nil {
				return err
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok {
			return fmt.Errorf("%s: printed %v, shown an array", path, got)
		}
		n := len(s)
		if n > 0 && s[n-1] == "..." {
			n--
			if len(g) <= n {
				return fmt.Errorf("%s: printed %d elements, shown more than %d", path, len(g), n)
			}
		} else if len(g) != n {
			return fmt.Errorf("%s: printed %d elements, shown %d", path, len(g), n)
		}
		for i := range n {
			if err := sameShownJSON(fmt.Sprintf("%s[%d]", path, i), s[i], g[i], tol); err != nil {
				return err
			}
		}
	case float64:
		g, ok := got.(float64)
		if !ok || math.Abs(g-s) > tol {
			return fmt.Errorf("%s: printed %v, shown %v", path, got, s)
		}
	default:
		if fmt.Sprint(s) != fmt.Sprint(got) {
			return fmt.Errorf("%s: printed %v, shown %v", path, got, s)
		}
	}
	return nil
}

// TestDocWarmupOutput runs the warmup command of docs/commands.md on the
// bundled tiny model: the lines shown, with the time and the fitted cost
// model's coefficients masked.
func TestDocWarmupOutput(t *testing.T) {
	const after = "time and the cost model vary):"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code, out, errOut := runCmd(t, ctx, "warmup", "--model", tinyModel(t, "tiny-hidden"),
		"--warmup-batches", "1,2", "--warmup-seqs", "8,64", "--threads", "1")
	if code != 0 {
		t.Fatalf("warmup: exit %d: %s", code, errOut)
	}
	checkShown(t, commandsPage, after, out,
		outputMask{regexp.MustCompile(`warmed in [0-9.]+[µnm]?s`), "warmed in <time>"},
		outputMask{regexp.MustCompile(`[0-9.]+(e[-+][0-9]+)? s/token`), "<x> s/token"})
}

// TestDocProvisionOutput runs the provision command of docs/commands.md
// on a server without the objects: what it would create, all of them.
func TestDocProvisionOutput(t *testing.T) {
	s := natstest.RunServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const cmd = "jetembed provision --replicas 3 --ack-wait 5m --max-ack-pending 4096 --dry-run"
	if got := shownCommand(t, commandsPage, "(`provisioner` in `deploy/`).\n"); got != cmd {
		t.Fatalf("%s shows %q, the test runs %q", commandsPage, got, cmd)
	}
	code, out, errOut := runCmd(t, ctx, append(strings.Fields(cmd)[1:], "--nats", s.ClientURL())...)
	if code != 0 {
		t.Fatalf("provision: exit %d: %s", code, errOut)
	}
	checkShown(t, commandsPage, "On a server that has none of them it prints:", out,
		outputMask{regexp.MustCompile(`nats://[0-9.]+:[0-9]+`), "nats://<server>"})
}

// TestDocHTTPBothOutput runs the /v1/embeddings:both curl command of
// docs/http-api.md as written against `jetembed dev` serving the bundled
// tiny model, and holds its answer to the JSON shown: every key, the
// sparse indices, the model and the usage exactly, the vector values shown
// within their rounding.
func TestDocHTTPBothOutput(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := startAPIDev(ctx, t, tinyModel(t, "tiny-hidden"))
	command := shownCommand(t, httpAPIPage, "is a base64 string):\n")
	if !strings.HasPrefix(command, "curl -s http://127.0.0.1:8081/v1/embeddings:both ") {
		t.Fatalf("%s shows %q", httpAPIPage, command)
	}
	out := runShell(t, t.TempDir(), command, curlHome(t, strings.TrimPrefix(d.api, "http://")))
	var shown, got any
	block := shownBlock(t, httpAPIPage, "BAAI/bge-m3's have 1,024 and its own vocabulary's ids):\n")
	if err := json.Unmarshal([]byte(elided(block)), &shown); err != nil {
		t.Fatalf("%s: the shown answer is not JSON with elisions: %v\n%s", httpAPIPage, err, block)
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("curl printed %v: %s", err, out)
	}
	if err := sameShownJSON("answer", shown, got, 1e-3); err != nil {
		t.Errorf("%s: %v\nprinted:\n%s", httpAPIPage, err, out)
	}
}
