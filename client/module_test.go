package client

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestUseFromAnotherModule follows docs/clients.md: a fresh module requires
// github.com/jetembed/jetembed with a replace to this checkout, imports
// client, and builds; its packages include no server side. It runs offline
// (GOPROXY=off) with go.sum seeded from this repository's.
func TestUseFromAnotherModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program in another module")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	main := `package main

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/jetembed/jetembed/client"
)

func main() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		fmt.Println(err)
		return
	}
	c, _ := client.New(nc)
	res, err := c.Embed(context.Background(), "hello")
	fmt.Println(res, err)
}
`
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"main.go": []byte(main), "go.sum": sum} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod", "GOWORK=off")
	for _, args := range [][]string{
		{"mod", "init", "example.com/producer"},
		{"mod", "edit", "-require", "github.com/jetembed/jetembed@v0.0.0", "-replace", "github.com/jetembed/jetembed=" + root},
		{"mod", "tidy", "-e"}, // -e: test-only deps of deps may be missing from a fresh module cache (GOPROXY=off)
		{"build", "-o", os.DevNull, "."},
	} {
		cmd := exec.Command(goBin, args...)
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	cmd := exec.Command(goBin, "list", "-deps", ".")
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"nats-server", "go.opentelemetry.io/otel/sdk", "jetembed/jetstream", "jetembed/engine"} {
		if strings.Contains(string(out), bad) {
			t.Errorf("the producer's build pulls in %s", bad)
		}
	}
}
