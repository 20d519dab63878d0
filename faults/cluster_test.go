package faults

import (
	"testing"
	"time"

	"github.com/jetembed/jetembed/internal/natstest"
)

// TestStreamLeaderKilledMidRun runs a bulk run on a three-node cluster with
// R3 streams and shuts down the jobs stream's leader in the middle; a new
// leader is elected from the replicas and the run completes on the two
// nodes left.
func TestStreamLeaderKilledMidRun(t *testing.T) {
	binary(t)
	c := natstest.RunCluster(t, 3)
	cfg := faultConfig(3, 2*time.Second)
	b := newBulk(t, c.URLs(), cfg, "leader")
	for _, s := range []string{cfg.Jobs.Name, cfg.Results.Name, cfg.DLQ.Name} {
		c.WaitOnStreamLeader("", s)
	}
	b.submit(bulkJobs)

	start := time.Now()
	s := startServe(t, serveArgs(t, c.URLs(), cfg)...)
	done := midRun(t, b)
	leader := c.StreamLeader("", cfg.Jobs.Name)
	if leader == nil {
		t.Fatal("the jobs stream has no leader")
	}
	results := c.StreamLeader("", cfg.Results.Name)
	i := c.Index(leader)
	c.Shutdown(i)
	t.Logf("jobs stream leader (node %d, also results leader: %v) shut down after %v with %d/%d results stored",
		i, results == leader, time.Since(start).Round(time.Millisecond), done, len(b.ids))
	c.WaitOnStreamLeader("", cfg.Jobs.Name)
	t.Logf("new jobs leader after %v", time.Since(start).Round(time.Millisecond))

	b.waitResults(len(b.ids), 120*time.Second)
	t.Logf("run finished %v after the start", time.Since(start).Round(time.Millisecond))
	b.verify()
	if !s.Running() {
		t.Errorf("serve exited when the leader went away: %v", s.Err())
	}
}
