package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetembed/jetembed/internal/natstest"
)

// natsCLIEnv names the nats CLI binary that `make deps` installs (natscli).
const natsCLIEnv = "JETEMBED_NATS_CLI"

// natsCLI returns the nats CLI to run, or skips the test when there is none:
// the variable first, then the `make deps` location.
func natsCLI(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(natsCLIEnv); p != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, err := filepath.Abs(filepath.Join("..", "..", ".deps", "bin", "nats"))
	if err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skipf("no nats CLI (%s unset and .deps/bin/nats missing); run `make deps`", natsCLIEnv)
	return ""
}

// TestNatsCLIRequest drives the request-reply endpoint the way the README
// tells operators to: the real `nats req` binary, JSON in, JSON out, against
// `jetembed dev` serving the tiny model.
func TestNatsCLIRequest(t *testing.T) {
	cli := natsCLI(t)
	model := tinyModel(t, "tiny-hidden")
	ctx, cancel := context.WithCancel(context.Background())
	d := startDev(ctx, t, model)
	defer func() {
		cancel()
		select {
		case <-d.done:
		case <-time.After(10 * time.Second):
			t.Error("dev did not stop after its context ended")
		}
	}()
	url := d.url

	// A private config dir keeps the user's nats contexts out of the test.
	env := append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir(), "HOME="+t.TempDir())
	var reply []byte
	natstest.CheckFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		defer ccancel()
		cmd := exec.CommandContext(cctx, cli, "req", "embed.v1.embed", `{"id":"1","texts":["hello"]}`,
			"-H", "Content-Type:application/json", "--server", url, "--timeout", "5s", "--raw")
		cmd.Env = env
		var stderr strings.Builder
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("nats req: %w: %s", err, stderr.String())
		}
		if len(strings.TrimSpace(string(b))) == 0 {
			return fmt.Errorf("nats req printed nothing: %s", stderr.String())
		}
		reply = b
		return nil
	})

	var res struct {
		ID    string `json:"id"`
		Model string `json:"model"`
		Items []struct {
			Dense  []float64 `json:"dense"`
			Tokens int       `json:"tokens"`
			Error  *struct {
				Code string `json:"code"`
			} `json:"error"`
		} `json:"items"`
		Error *struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(reply, &res); err != nil {
		t.Fatalf("reply is not the JSON result: %v\n%s", err, reply)
	}
	if res.Error != nil || res.ID != "1" || len(res.Items) != 1 || res.Items[0].Error != nil {
		t.Fatalf("reply: %s", reply)
	}
	it := res.Items[0]
	if len(it.Dense) != 32 {
		t.Fatalf("dense has %d values, want the tiny model's 32", len(it.Dense))
	}
	var norm float64
	for _, v := range it.Dense {
		norm += v * v
	}
	if math.Abs(math.Sqrt(norm)-1) > 1e-4 {
		t.Errorf("dense norm %v, want 1 (L2-normalized CLS)", math.Sqrt(norm))
	}
	// "hello" is <s> + one or more pieces + </s>.
	if it.Tokens < 3 {
		t.Errorf("tokens %d, want at least 3", it.Tokens)
	}
}

// devRun is a `jetembed dev` running inside the test process.
type devRun struct {
	url         string
	out, errOut *lockedBuffer
	done        chan int // its exit code, once it returns
}

// startDev runs `jetembed dev` on a free loopback port with a fresh data
// directory, serving model without warm-up (and with the extra flags),
// until ctx ends; it returns once the embedded server's URL is printed.
func startDev(ctx context.Context, t *testing.T, model string, extra ...string) *devRun {
	t.Helper()
	d := &devRun{out: &lockedBuffer{}, errOut: &lockedBuffer{}, done: make(chan int, 1)}
	args := append([]string{"dev", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--model", model,
		"--http", "", "--http-api", "", "--warmup-batches", "", "--probe=false", "--threads", "1", "--heartbeat", "0"}, extra...)
	go func() {
		d.done <- runMain(ctx, args, stdio{in: strings.NewReader(""), out: d.out, err: d.errOut})
	}()
	urlRE := regexp.MustCompile(`dev server on (nats://127\.0\.0\.1:\d+)`)
	natstest.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		select {
		case code := <-d.done:
			t.Fatalf("dev exited early with %d: %s%s", code, d.out.String(), d.errOut.String())
		default:
		}
		m := urlRE.FindStringSubmatch(d.out.String())
		if m == nil {
			return errors.New("no server URL printed yet")
		}
		d.url = m[1]
		return nil
	})
	return d
}

// serveDev runs `jetembed dev` (with the extra flags) for the rest of the
// test and returns once its request-reply endpoint answers, as a reader
// waits for the banner before trying the commands; the test's cleanup
// stops it.
func serveDev(t *testing.T, model string, extra ...string) *devRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d := startDev(ctx, t, model, extra...)
	t.Cleanup(func() {
		cancel()
		select {
		case <-d.done:
		case <-time.After(10 * time.Second):
			t.Error("dev did not stop after its context ended")
		}
	})
	nc, err := nats.Connect(d.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	natstest.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		_, err := nc.Request("embed.v1.embed", []byte(`{"id":"probe","texts":["x"]}`), 2*time.Second)
		return err
	})
	return d
}
