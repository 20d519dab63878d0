package natstest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetembed/jetembed/internal/testkit"
)

// ServerBinEnv names the environment variable that points to the nats-server
// binary used by [StartProcess]; `make deps` installs it and the Makefile
// exports it.
const ServerBinEnv = "JETEMBED_NATS_SERVER_BIN"

// Process is the real nats-server binary running as a child process with
// JetStream file storage, for tests that kill a server the hard way and
// start it again on the same port and store.
type Process struct {
	t        testing.TB
	bin      string
	args     []string
	port     int
	storeDir string
	cmd      *exec.Cmd
	log      Buffer
	done     chan struct{}
}

// StartProcess starts $JETEMBED_NATS_SERVER_BIN on a free loopback port with
// JetStream stored in a fresh t.TempDir(), passing extraArgs as well. It
// skips the test when the binary is not configured or missing, and kills the
// process at cleanup.
func StartProcess(t testing.TB, extraArgs ...string) *Process {
	t.Helper()
	bin := os.Getenv(ServerBinEnv)
	if bin == "" {
		t.Skipf("natstest: $%s is not set; run `make deps` and use `make test`", ServerBinEnv)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("natstest: nats-server binary from $%s: %v; run `make deps`", ServerBinEnv, err)
	}
	p := &Process{t: t, bin: bin, port: FreePort(t), storeDir: t.TempDir()}
	p.args = append([]string{
		"-a", "127.0.0.1", "-p", strconv.Itoa(p.port),
		"-js", "-sd", p.storeDir,
	}, extraArgs...)
	t.Cleanup(func() { p.Kill() })
	p.start()
	return p
}

// URL is the client URL of the server; it stays the same across restarts.
func (p *Process) URL() string { return clientURL(p.port) }

// Log returns what the server printed so far, for failure messages.
func (p *Process) Log() string { return p.log.String() }

func (p *Process) start() {
	p.t.Helper()
	p.cmd = exec.Command(p.bin, p.args...)
	p.log.Reset()
	p.cmd.Stdout = &p.log
	p.cmd.Stderr = &p.log
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("natstest: start %s: %v", p.bin, err)
	}
	p.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(p.cmd, p.done)
	deadline := time.Now().Add(readyTimeout)
	for {
		err := p.ping()
		if err == nil {
			return
		}
		select {
		case <-p.done:
			p.t.Fatalf("natstest: nats-server exited before it was ready: %v\n%s", err, p.log.String())
		default:
		}
		if time.Now().After(deadline) {
			p.Kill()
			p.t.Fatalf("natstest: nats-server not ready within %v: %v\n%s", readyTimeout, err, p.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ping connects and reads the INFO line: the server sends it only once its
// client listener runs, which is after JetStream has recovered its store.
func (p *Process) ping() error {
	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p.port), time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "INFO ") {
		return errors.New("unexpected greeting: " + line)
	}
	return nil
}

// Kill ends the server with SIGKILL, as a crash would, and waits for it.
func (p *Process) Kill() {
	p.signal(syscall.SIGKILL)
}

func (p *Process) signal(sig os.Signal) {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(readyTimeout):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Restart kills the server if it still runs and starts it again on the same
// port with the same store.
func (p *Process) Restart() {
	p.t.Helper()
	p.Kill()
	p.start()
}

// Buffer is [testkit.Buffer]: the log of a process under test, which its
// output copier writes while the test reads it.
type Buffer = testkit.Buffer
