package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNodeExample runs examples/node/embed.mjs, with the official NATS
// client pinned in its package-lock.json, against `jetembed dev`: a
// request-reply call and a queued job with a results subject, both
// answered with vectors. It installs the example's dependencies (npm ci
// into examples/node/node_modules, git-ignored) when they are missing, and
// skips, saying so, when Node.js or npm is not installed.
func TestNodeExample(t *testing.T) {
	if testing.Short() {
		t.Skip("installs and runs the Node.js example")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("Node.js not installed: examples/node not tested")
	}
	dir, err := filepath.Abs(filepath.Join("..", "..", "examples", "node"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@nats-io", "transport-node")); err != nil {
		npm, err := exec.LookPath("npm")
		if err != nil {
			t.Skip("npm not installed: examples/node not tested")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in examples/node: %v\n%s", err, out)
		}
	}
	model := tinyModel(t, "tiny-hidden")
	d := serveDev(t, model)
	ctx := context.Background()

	rctx, rcancel := context.WithTimeout(ctx, 60*time.Second)
	defer rcancel()
	cmd := exec.CommandContext(rctx, node, "embed.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NATS_URL="+d.url)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node embed.mjs: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines, got:\n%s", out)
	}
	for i, want := range []struct {
		path  string
		items int
	}{{"request", 1}, {"queued", 2}} {
		var got struct {
			Path, ID, Model      string
			Items, Dense, Sparse int
		}
		if err := json.Unmarshal([]byte(lines[i]), &got); err != nil {
			t.Fatalf("line %q: %v", lines[i], err)
		}
		if got.Path != want.path || got.Items != want.items || got.Dense != 32 || !strings.Contains(got.Model, "@") {
			t.Errorf("%s: %+v", want.path, got)
		}
	}
}
