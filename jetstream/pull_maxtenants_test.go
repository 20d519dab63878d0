package jetstream_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
)

// logTap keeps what a worker logs, to count its messages (and passes it on
// to stderr under -v).
type logTap struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logTap) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if testing.Verbose() {
		_, _ = os.Stderr.Write(p)
	}
	return l.buf.Write(p)
}

func (l *logTap) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), msg)
}

func (l *logTap) logger() *slog.Logger {
	var w io.Writer = l
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

const waitMsg = "tenants with jobs wait for a consumer"

// startBoundWorker is a member with per-tenant consumers bounded by fair.
func startBoundWorker(t *testing.T, srv *server, in *intake, fair jetstream.FairConfig, log *slog.Logger) *jetstream.Worker {
	t.Helper()
	step := make(chan struct{})
	close(step)
	return runWorker(t, srv, jetstream.WorkerConfig{
		Embedder: steppedEmbedder(t, step), Sink: in.sink, Logger: log,
		Refresh: 50 * time.Millisecond, PrefetchMax: 64, Fair: fair,
	})
}

// tenantConsumers lists the tenants' consumers on the server.
func tenantConsumers(t *testing.T, srv *server) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := srv.js.Stream(ctx, srv.cfg.Jobs.Name)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	names := s.ConsumerNames(ctx)
	for n := range names.Name() {
		if n != srv.cfg.Consumer.Name {
			out = append(out, n)
		}
	}
	return out
}

// quotaText is ~100 tokens: over a quota of 60 a minute, a tenant's
// second job waits ~40 s, its tenth minutes.
var quotaText = strings.Repeat("quota text ", 36)

// TestFairPullMaxTenantsSlotFreedElsewhere: at the bound, with a tenant
// waiting, the slot holder's consumer is deleted by someone else (an
// operator, another member): the slot is free, and the member fills it
// at its next refresh, not at its next full scan (an hour here). Without
// it, nothing marks the slot freed: the member looks at uncovered jobs
// only after one of its own retirements.
func TestFairPullMaxTenantsSlotFreedElsewhere(t *testing.T) {
	srv := newServer(t, perTenant)
	publishJobs(t, srv, "hog", 10, quotaText)
	in := &intake{}
	tap := &logTap{}
	startBoundWorker(t, srv, in, jetstream.FairConfig{MaxTenants: 1, Scan: time.Hour,
		Shares: jetstream.Shares{Quotas: map[string]jetstream.Quota{jetstream.AnyTenant: {TokensPerMinute: 60}}}}, tap.logger())
	hog := jetstream.TenantConsumerName(srv.cfg.Consumer.Name, "hog")
	natstest.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if len(in.snapshot()) < 1 {
			return fmt.Errorf("hog's first job not taken")
		}
		return nil
	})
	publishJobs(t, srv, "victim", 1, "a text")
	natstest.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if tap.count(waitMsg) < 1 {
			return fmt.Errorf("victim not waiting yet")
		}
		return nil
	})
	// The slot frees: an operator deletes the hog's consumer.
	if err := srv.js.DeleteConsumer(context.Background(), srv.cfg.Jobs.Name, hog); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		if c := tenantConsumers(t, srv); len(c) == 0 {
			return fmt.Errorf("no tenant's consumer since %s was deleted", hog)
		}
		return nil
	})
}

// TestFairPullMaxTenantsHolderNeverEmpty: at the bound, the one slot is
// held by a tenant that never empties (here it is over its quota: it may
// take a job a ~40 s and has ten; a producer that keeps its tenants
// backlogged does the same with no quota). The waiting tenant's one job
// must still be answered in bounded time (its slot lease, Idle here), not
// after the holder's whole backlog.
func TestFairPullMaxTenantsHolderNeverEmpty(t *testing.T) {
	srv := newServer(t, perTenant)
	publishJobs(t, srv, "hog", 10, quotaText)
	in := &intake{}
	startBoundWorker(t, srv, in, jetstream.FairConfig{MaxTenants: 1, Scan: 100 * time.Millisecond, Idle: time.Second,
		Shares: jetstream.Shares{Quotas: map[string]jetstream.Quota{jetstream.AnyTenant: {TokensPerMinute: 60}}}}, testLogger(t))
	natstest.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if len(in.snapshot()) < 1 {
			return fmt.Errorf("hog's first job not taken")
		}
		return nil
	})
	publishJobs(t, srv, "victim", 1, quotaText)
	natstest.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		if indexOf(in.snapshot(), "victim") < 0 {
			return fmt.Errorf("victim's job not taken; consumers %q", tenantConsumers(t, srv))
		}
		return nil
	})
}

// TestFairPullMaxTenantsWarnsOnce: 30 minted tenants with a job each and
// a bound of 2: the slots go round at every refresh and the count of
// waiting tenants falls at each; the member warns when tenants start to
// wait and then at most once a scan interval (10 s here), not at every
// change of the count.
func TestFairPullMaxTenantsWarnsOnce(t *testing.T) {
	srv := newServer(t, perTenant)
	const tenants = 30
	for i := range tenants {
		publishJobs(t, srv, fmt.Sprintf("minted%02d", i), 1, "a text")
	}
	in := &intake{}
	tap := &logTap{}
	start := time.Now()
	const scan = 10 * time.Second
	startBoundWorker(t, srv, in, jetstream.FairConfig{MaxTenants: 2, Scan: scan}, tap.logger())
	natstest.CheckFor(t, 60*time.Second, 50*time.Millisecond, func() error {
		if n := len(in.snapshot()); n != tenants {
			return fmt.Errorf("%d jobs taken of %d", n, tenants)
		}
		return nil
	})
	elapsed := time.Since(start)
	n := tap.count(waitMsg)
	t.Logf("%d warnings in %s", n, elapsed.Round(time.Millisecond))
	if want := 1 + int(elapsed/scan) + 1; n > want {
		t.Errorf("%d warnings that tenants wait in %s, want at most %d", n, elapsed.Round(time.Millisecond), want)
	}
}

// TestFairPullMaxTenantsTwoMembers: two members at one bound of 3 with
// 20 minted tenants: every job is answered once, neither member stops,
// and the consumers of the tenants stay within what the two can make at
// once (each its scan's worth over the other's list: twice the bound).
func TestFairPullMaxTenantsTwoMembers(t *testing.T) {
	srv := newServer(t, perTenant)
	const maxTenants, tenants, jobs = 3, 20, 2
	made := watchConsumers(t, srv, nil)
	fair := jetstream.FairConfig{MaxTenants: maxTenants, Scan: 100 * time.Millisecond}
	ins := []*intake{{}, {}}
	ws := []*jetstream.Worker{
		startBoundWorker(t, srv, ins[0], fair, testLogger(t)),
		startBoundWorker(t, srv, ins[1], fair, testLogger(t)),
	}
	for i := range tenants {
		publishJobs(t, srv, fmt.Sprintf("minted%02d", i), jobs, "a text")
	}
	natstest.CheckFor(t, 60*time.Second, 50*time.Millisecond, func() error {
		if n := natstest.StreamCount(t, srv.js, srv.cfg.Results.Name); n < tenants*jobs {
			return fmt.Errorf("%d results of %d", n, tenants*jobs)
		}
		return nil
	})
	for i, w := range ws {
		select {
		case <-w.Done():
			t.Errorf("member %d stopped: %v", i, w.Err())
		default:
		}
	}
	most, created := made.counts()
	taken := len(ins[0].snapshot()) + len(ins[1].snapshot())
	t.Logf("consumers: at most %d at once, %d made; %d deliveries taken for %d jobs", most, created, taken, tenants*jobs)
	if most > 2*maxTenants {
		t.Errorf("%d consumers at once, want at most %d", most, 2*maxTenants)
	}
}

// TestFairPullMaxTenantsHolderWithBuffer: at the bound, the one slot is
// held by a tenant with a long backlog and no quota, whose fetch loop has
// jobs buffered behind the one in the job loop (each job takes 20 ms).
// When its lease is up, the waiting tenant's job is taken in a few
// seconds, well within the consumers' ack wait (a minute here). Two ways
// this failed: the yielding loop NAKed what it had buffered, and the
// server counts a NAKed message as pending an ack until it is delivered
// again, which no one does while the members yield, so the consumer was
// never retired (neither tenant got a job through), and once retired
// after an ack wait, not before the minute; and the tenant that yielded
// was drawn for the free slot on equal terms with the waiting one (half
// the rotations gave the slot back to it). Now the loop hands its buffer
// to the job loop, the consumer goes once that is answered, and the
// waiting tenant takes the slot first.
func TestFairPullMaxTenantsHolderWithBuffer(t *testing.T) {
	srv := newServer(t, func(c *jetstream.Config) {
		perTenant(c)
		c.Consumer.AckWait = time.Minute
		c.Consumer.BackOff = nil
	})
	publishJobs(t, srv, "hog", 1000, "a text")
	in := &intake{}
	slow := engine.EmbedderFunc(func(ctx context.Context, texts []engine.Text, _ engine.Call) ([]engine.Embedding, engine.CallReport, error) {
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return nil, engine.CallReport{}, ctx.Err()
		}
		out := make([]engine.Embedding, len(texts))
		for i := range out {
			out[i] = engine.Embedding{Dense: []float32{1}, Tokens: 1}
		}
		return out, engine.CallReport{Tokens: len(texts)}, nil
	})
	runWorker(t, srv, jetstream.WorkerConfig{
		Embedder: slow, Sink: in.sink, Refresh: 50 * time.Millisecond, PrefetchMax: 64,
		Fair: jetstream.FairConfig{MaxTenants: 1, Scan: 100 * time.Millisecond, Idle: time.Second},
	})
	natstest.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if len(in.snapshot()) < 1 {
			return fmt.Errorf("hog's first job not taken")
		}
		return nil
	})
	publishJobs(t, srv, "victim", 1, "a text")
	// The lease is a second; what the holder buffered (at most 64 jobs of
	// 20 ms) is answered first: 20 s is far from both and from the
	// minute an ack wait takes.
	natstest.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		if indexOf(in.snapshot(), "victim") < 0 {
			return fmt.Errorf("victim's job not taken (%d of the hog's taken); consumers %q", len(in.snapshot()), tenantConsumers(t, srv))
		}
		return nil
	})
}
