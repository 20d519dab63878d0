package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetembed/jetembed/internal/natstest"
)

// startGatewayProc runs `jetembed gateway` as a child process (this test
// binary re-executed) under a file limit of nofile, and returns its pid
// and log.
func startGatewayProc(t *testing.T, nofile int, args ...string) (int, *lockedBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMemoryHelperProcess$")
	cmd.Env = append(os.Environ(), envHelperArgs+"="+strings.Join(append([]string{"gateway"}, args...), "\n"),
		envHelperNofile+"="+strconv.Itoa(nofile))
	log := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = io.Discard, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			out := log.String()
			if len(out) > 8000 {
				out = out[:4000] + "\n...\n" + out[len(out)-4000:]
			}
			t.Logf("gateway log:\n%s", out)
		}
	})
	return cmd.Process.Pid, log
}

// flood keeps n connections open to addr from the loopback addresses
// 127.0.0.2 and up, as a crowd of idle keep-alive clients would: half send
// one request and then hold the connection idle, half send nothing; a
// connection the gateway closes is dialled again after a pause. It runs
// until stop is closed; opened counts the connections made.
func flood(addr string, n int, stop <-chan struct{}, opened *atomic.Int64) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i := range n {
		local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%8))}
		wg.Go(func() {
			d := net.Dialer{LocalAddr: local, Timeout: 2 * time.Second}
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := d.Dial("tcp", addr)
				if err == nil {
					opened.Add(1)
					go func() { <-stop; c.Close() }()
					if i%2 == 0 {
						fmt.Fprintf(c, "GET /health HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
					}
					_, _ = io.Copy(io.Discard, c) // until the gateway closes it
					c.Close()
				}
				select {
				case <-stop:
					return
				case <-time.After(time.Second):
				}
			}
		})
	}
	return &wg
}

// TestGatewayUnderConnectionFlood is reproduction 2 of issue 24, scaled to
// a low file limit: 20k idle keep-alive connections used to exhaust the
// gateway's file descriptors (accept failing with "too many open files",
// logged as plain text), legitimate calls timed out, the ops port's
// /metrics was unreachable and RSS grew ninefold. Here `jetembed gateway`
// runs under a file limit of 256 while 1024 connections (four times it)
// come and stay: its connection cap keeps it below the limit by closing
// idle connections first, calls and /metrics are answered at once, every
// log line is JSON, and RSS stays flat.
func TestGatewayUnderConnectionFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("a connection flood against a child process")
	}
	model := tinyModel(t, "tiny-hidden")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := startDev(ctx, t, model)
	natstest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		if logValue(d.errOut.String(), "ready", "model") == "" && !strings.Contains(d.errOut.String(), "ready") {
			return fmt.Errorf("dev not ready")
		}
		return nil
	})
	pid, log := startGatewayProc(t, 256, "--nats", d.url, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-format", "json")
	var api, ops string
	natstest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		api, ops = logValue(log.String(), "http api listening", "addr"), logValue(log.String(), "http listening", "addr")
		if api == "" || ops == "" || logValue(log.String(), "ready", "nats") == "" {
			return fmt.Errorf("gateway not ready: %s", log.String())
		}
		return nil
	})
	call := func(url, body string) (int, time.Duration, error) {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		start := time.Now()
		var resp *http.Response
		var err error
		if body == "" {
			resp, err = c.Get(url)
		} else {
			resp, err = c.Post(url, "application/json", strings.NewReader(body))
		}
		if err != nil {
			return 0, time.Since(start), err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, time.Since(start), nil
	}
	if code, _, err := call("http://"+api+"/v1/embeddings", `{"input":"warm"}`); code != 200 {
		t.Fatalf("before the flood: %d %v", code, err)
	}
	idleRSS := procStatus(t, pid, "VmRSS")

	stop := make(chan struct{})
	var opened atomic.Int64
	wg := flood(api, 1024, stop, &opened)
	defer func() { close(stop); wg.Wait() }()
	natstest.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		if n := opened.Load(); n < 1024 {
			return fmt.Errorf("%d connections opened", n)
		}
		return nil
	})
	for i := range 15 {
		code, took, err := call("http://"+api+"/v1/embeddings", fmt.Sprintf(`{"input":"a legitimate call %d"}`, i))
		if code != 200 || took > 3*time.Second {
			t.Errorf("call %d during the flood: %d %v after %s", i, code, err, took)
		}
		code, took, err = call("http://"+ops+"/metrics", "")
		if code != 200 || took > 3*time.Second {
			t.Errorf("ops /metrics %d during the flood: %d %v after %s", i, code, err, took)
		}
		time.Sleep(200 * time.Millisecond)
	}
	rss := procStatus(t, pid, "VmRSS")
	t.Logf("%d connections opened; RSS idle %d MiB, under the flood %d MiB", opened.Load(), idleRSS>>20, rss>>20)
	if rss > idleRSS+64<<20 {
		t.Errorf("RSS grew from %d to %d MiB under the flood", idleRSS>>20, rss>>20)
	}
	sc := bufio.NewScanner(strings.NewReader(log.String()))
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); line != "" && !json.Valid([]byte(line)) {
			t.Errorf("a log line that is not JSON: %q", line)
		}
	}
}
