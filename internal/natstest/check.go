package natstest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetembed/jetembed/internal/testkit"
)

// CheckFor calls f every interval until it returns nil, and fails the test
// with f's last error if that has not happened within total
// ([testkit.CheckFor]).
func CheckFor(t testing.TB, total, every time.Duration, f func() error) {
	t.Helper()
	testkit.CheckFor(t, total, every, f)
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
// Clusters and restartable servers need fixed ports: routes name their peers
// and a restarted server must come back where its clients expect it.
//
// The port is below the kernel's ephemeral range, where no outgoing
// connection takes its local port: one from 127.0.0.1:0 could be taken by
// any client connection of the machine before the server listens on it
// (the server then never becomes ready). Nor is a port returned twice by
// one test binary.
func FreePort(t testing.TB) int {
	t.Helper()
	lo := ephemeralLow()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		port := minFixedPort + rand.IntN(lo-minFixedPort)
		if portsGiven[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		portsGiven[port] = true
		return port
	}
	t.Fatalf("natstest: no free port in [%d, %d)", minFixedPort, lo)
	return 0
}

// minFixedPort is the lowest port [FreePort] returns.
const minFixedPort = 10000

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default where it cannot be read).
func ephemeralLow() int {
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > minFixedPort+1000 {
				lo = n
			}
		}
	}
	return lo
}

func clientURL(port int) string {
	return fmt.Sprintf("nats://127.0.0.1:%d", port)
}
