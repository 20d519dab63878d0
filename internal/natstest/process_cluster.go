package natstest

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// StartProcessCluster starts n nats-server binaries ([StartProcess]) that
// form one JetStream cluster over loopback routes. Each keeps its port and
// store across [Process.Restart]. The caller waits for a meta leader the
// way a client does: its first JetStream request succeeds.
func StartProcessCluster(t testing.TB, n int) []*Process {
	t.Helper()
	name := fmt.Sprintf("P%d", rand.IntN(1e6))
	routePorts := make([]int, n)
	routes := make([]string, n)
	for i := range routePorts {
		routePorts[i] = FreePort(t)
		routes[i] = "nats-route://127.0.0.1:" + strconv.Itoa(routePorts[i])
	}
	ps := make([]*Process, n)
	for i := range ps {
		ps[i] = StartProcess(t,
			"--server_name", fmt.Sprintf("%s-S%d", name, i+1),
			"--cluster_name", name,
			"--cluster", "nats://127.0.0.1:"+strconv.Itoa(routePorts[i]),
			"--routes", strings.Join(routes, ","))
	}
	return ps
}

// ProcessURLs returns the client URLs of ps, comma separated.
func ProcessURLs(ps []*Process) string {
	urls := make([]string, len(ps))
	for i, p := range ps {
		urls[i] = p.URL()
	}
	return strings.Join(urls, ",")
}

// PID is the process id of the running server, 0 before it started.
func (p *Process) PID() int {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}
