package natstest

import (
	"fmt"
	"net"
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
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("natstest: no free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func clientURL(port int) string {
	return fmt.Sprintf("nats://127.0.0.1:%d", port)
}
