package faults

import (
	"testing"
	"time"

	"github.com/jetembed/jetembed/internal/natstest"
)

// bulkJobs is the size of the bulk runs: thousands of small jobs, so that a
// fault lands while hundreds are in flight, yet a run takes seconds on the
// tiny model.
const bulkJobs = 3000

// midRun waits until a quarter of the run's results are stored and returns
// how many there were when the fault is injected; it fails the test if the
// run already finished, since then nothing was in flight.
func midRun(t *testing.T, b *bulk) uint64 {
	t.Helper()
	b.waitResults(len(b.ids)/4, 60*time.Second)
	n, err := b.count(b.cfg.Results.Name)
	if err != nil {
		t.Fatal(err)
	}
	if n >= uint64(len(b.ids)) {
		t.Fatalf("the run finished (%d results) before the fault: nothing was in flight", n)
	}
	return n
}

func TestConsumerKilledMidRun(t *testing.T) {
	binary(t)
	srv := natstest.RunServer(t)
	cfg := faultConfig(1, 2*time.Second)
	b := newBulk(t, srv.ClientURL(), cfg, "sigkill")
	b.submit(bulkJobs)

	start := time.Now()
	a := startServe(t, serveArgs(t, srv.ClientURL(), cfg)...)
	done := midRun(t, b)
	info, err := b.consumerInfo()
	if err != nil {
		t.Fatal(err)
	}
	a.Kill()
	t.Logf("SIGKILL after %v with %d/%d results stored and %d jobs ack-pending",
		time.Since(start).Round(time.Millisecond), done, len(b.ids), info.NumAckPending)

	restart := time.Now()
	startServe(t, serveArgs(t, srv.ClientURL(), cfg)...)
	b.waitResults(len(b.ids), 90*time.Second)
	t.Logf("restarted consumer finished the run in %v", time.Since(restart).Round(time.Millisecond))
	b.verify()
	// The killed process held deliveries; they must have come back.
	if after, err := b.consumerInfo(); err != nil {
		t.Error(err)
	} else if after.Delivered.Consumer <= uint64(len(b.ids)) {
		t.Errorf("%d deliveries for %d jobs: nothing held by the killed process (%d ack pending) was redelivered",
			after.Delivered.Consumer, len(b.ids), info.NumAckPending)
	}
}

func TestServerRestartMidRun(t *testing.T) {
	binary(t)
	p := natstest.StartProcess(t)
	cfg := faultConfig(1, 2*time.Second)
	b := newBulk(t, p.URL(), cfg, "restart")
	b.submit(bulkJobs)

	start := time.Now()
	s := startServe(t, serveArgs(t, p.URL(), cfg)...)
	done := midRun(t, b)
	p.Restart()
	t.Logf("nats-server SIGKILLed and restarted after %v with %d/%d results stored",
		time.Since(start).Round(time.Millisecond), done, len(b.ids))

	b.waitResults(len(b.ids), 90*time.Second)
	t.Logf("run finished %v after the restart", time.Since(start).Round(time.Millisecond))
	b.verify()
	if !s.Running() {
		t.Errorf("serve exited across the server restart: %v", s.Err())
	}
}
