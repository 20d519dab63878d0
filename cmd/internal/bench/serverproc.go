package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// serverProcessEnv, set to the path of a nats-server binary (make deps
// installs one: $JETEMBED_NATS_SERVER_BIN), makes the NATS runs use a
// server process of their own instead of the one embedded in this process,
// as a deployment does: its goroutines then no longer share this process's
// Go scheduler (the machine's cores they still share).
const serverProcessEnv = "JETEMBED_BENCH_SERVER_PROCESS"

// startServerProcess starts bin with JetStream stored under dir on a free
// loopback port and waits until it greets a client; stop kills it.
func startServerProcess(bin, dir string) (url string, stop func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", dir)
	var log bytes.Buffer // read only if it never greets: its lines would interleave the bench's
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start %s: %w", bin, err)
	}
	stop = func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(30 * time.Second); ; {
		if greets(addr) {
			return "nats://" + addr, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("%s: no greeting on %s within 30s: %s", bin, addr, log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// greets reports whether a server at addr sends its INFO line (it does
// once JetStream has recovered its store).
func greets(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "INFO ")
}
