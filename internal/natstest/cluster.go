package natstest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Cluster is an in-process JetStream cluster on loopback ports, made by
// [RunCluster]. Its servers keep their ports and store directories across
// [Cluster.Shutdown] and [Cluster.Restart].
type Cluster struct {
	t       testing.TB
	name    string
	opts    []*server.Options
	servers []*server.Server // nil while a node is shut down
}

// RunCluster starts an n-node JetStream cluster and waits until it has a
// meta leader. All nodes are shut down at cleanup.
func RunCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("natstest: cluster of %d nodes", n)
	}
	c := &Cluster{t: t, name: fmt.Sprintf("C%d", rand.IntN(1e6))}
	routePorts := make([]int, n)
	routes := make([]string, n)
	for i := range routePorts {
		routePorts[i] = FreePort(t)
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", routePorts[i])
	}
	for i := 0; i < n; i++ {
		o := DefaultOptions(t.TempDir())
		o.Port = FreePort(t)
		o.ServerName = fmt.Sprintf("%s-S%d", c.name, i+1)
		o.Cluster = server.ClusterOpts{Name: c.name, Host: "127.0.0.1", Port: routePorts[i]}
		o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		for _, opt := range opts {
			opt(o)
		}
		c.opts = append(c.opts, o)
	}
	c.servers = make([]*server.Server, n)
	t.Cleanup(c.shutdownAll)
	for i := range c.opts {
		c.start(i)
	}
	c.WaitOnLeader()
	return c
}

func (c *Cluster) start(i int) {
	c.t.Helper()
	s, err := startServer(c.opts[i].Clone())
	if err != nil {
		c.t.Fatalf("natstest: cluster node %d: %v", i, err)
	}
	c.servers[i] = s
}

func (c *Cluster) shutdownAll() {
	for i, s := range c.servers {
		if s != nil {
			s.Shutdown()
			s.WaitForShutdown()
			c.servers[i] = nil
		}
	}
}

// URLs returns the client URLs of all nodes, comma separated, the way a
// client that knows the whole cluster is configured.
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.opts))
	for i, o := range c.opts {
		urls[i] = clientURL(o.Port)
	}
	return strings.Join(urls, ",")
}

// Leader returns the JetStream meta leader, or nil if there is none.
func (c *Cluster) Leader() *server.Server {
	for _, s := range c.servers {
		if s != nil && s.Running() && s.JetStreamIsLeader() {
			return s
		}
	}
	return nil
}

// WaitOnLeader waits up to 10s for a meta leader.
func (c *Cluster) WaitOnLeader() {
	c.t.Helper()
	CheckFor(c.t, readyTimeout, 20*time.Millisecond, func() error {
		l := c.Leader()
		if l == nil {
			return errors.New("no JetStream meta leader")
		}
		// A leader alone is not enough: an R3 stream created before every
		// peer has joined fails with "no suitable peers for placement".
		if peers, want := len(l.JetStreamClusterPeers()), c.running(); peers < want {
			return fmt.Errorf("meta leader sees %d of %d peers", peers, want)
		}
		for _, s := range c.servers {
			if s != nil && s.Running() && !s.JetStreamIsCurrent() {
				return fmt.Errorf("server %s is not current with the meta leader", s.Name())
			}
		}
		return nil
	})
}

// running counts the nodes that are up.
func (c *Cluster) running() int {
	n := 0
	for _, s := range c.servers {
		if s != nil && s.Running() {
			n++
		}
	}
	return n
}

// StreamLeader returns the node that leads stream in account ("" is the
// global account), or nil.
func (c *Cluster) StreamLeader(account, stream string) *server.Server {
	if account == "" {
		account = server.DEFAULT_GLOBAL_ACCOUNT
	}
	for _, s := range c.servers {
		if s != nil && s.Running() && s.JetStreamIsStreamLeader(account, stream) {
			return s
		}
	}
	return nil
}

// WaitOnStreamLeader waits up to 10s for stream to have a leader.
func (c *Cluster) WaitOnStreamLeader(account, stream string) *server.Server {
	c.t.Helper()
	var leader *server.Server
	CheckFor(c.t, readyTimeout, 20*time.Millisecond, func() error {
		if leader = c.StreamLeader(account, stream); leader == nil {
			return fmt.Errorf("no leader for stream %q", stream)
		}
		return nil
	})
	return leader
}

// RandomNonStreamLeader returns a running node that does not lead stream.
func (c *Cluster) RandomNonStreamLeader(account, stream string) *server.Server {
	leader := c.StreamLeader(account, stream)
	for _, i := range rand.Perm(len(c.servers)) {
		if s := c.servers[i]; s != nil && s != leader && s.Running() {
			return s
		}
	}
	return nil
}

// Index returns the position of s in the cluster, or -1.
func (c *Cluster) Index(s *server.Server) int {
	for i, x := range c.servers {
		if x != nil && x == s {
			return i
		}
	}
	return -1
}

// Shutdown stops node i; its store stays for [Cluster.Restart].
func (c *Cluster) Shutdown(i int) {
	if s := c.servers[i]; s != nil {
		s.Shutdown()
		s.WaitForShutdown()
		c.servers[i] = nil
	}
}

// Restart starts node i again with its old ports and store, and waits for
// a meta leader.
func (c *Cluster) Restart(i int) *server.Server {
	c.t.Helper()
	c.Shutdown(i)
	c.start(i)
	c.WaitOnLeader()
	return c.servers[i]
}
