package fleet

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

var (
	full        = flag.Bool("fleet.full", false, "the measured run (64 members, 200k jobs) instead of the smoke run")
	nMembers    = flag.Int("fleet.members", 0, "members at the start (default 4, or 64 with -fleet.full); churn adds half as many")
	nJobs       = flag.Int("fleet.jobs", 0, "jobs in the backlog (default 500, or 200000 with -fleet.full)")
	longShare   = flag.Float64("fleet.long", 0.02, "share of jobs that hold one long text (~1k tokens)")
	tokensPerS  = flag.Float64("fleet.tokens-per-s", 0, "fake GPU throughput per member, tokens/s (default 62000, or 4000 in the smoke run so that churn meets work)")
	ackWait     = flag.Duration("fleet.ack-wait", 0, "the consumer's AckWait: how soon a killed member's jobs come back (default 10s, 4s in the smoke run)")
	maxAckPend  = flag.Int("fleet.max-ack-pending", 0, "the consumer's MaxAckPending (default 64 per member at the peak)")
	prefetchMax = flag.Int("fleet.prefetch", 0, "each member's prefetch cap (0: the worker's default)")
	inFlight    = flag.Int("fleet.inflight-tokens", 0, "each member's job loop InFlightTokens (serve --in-flight-tokens; 0: the default)")
	outFile     = flag.String("fleet.out", "", "also write the Markdown report to this file")
)

// plan is one run's size.
type plan struct {
	members, jobs int
	long          float64
	cost          gpuCost
	ackWait       time.Duration
}

func planFromFlags() plan {
	p := plan{members: 4, jobs: 500, long: *longShare, cost: defaultCost(), ackWait: 4 * time.Second}
	if *full {
		p.members, p.jobs, p.ackWait = 64, 200000, 10*time.Second
	} else {
		// The smoke run checks the mechanics: slow GPUs so that the churn
		// meets work in flight, short compiles.
		p.cost.TokensPerSec = 4000
		p.cost.Compile, p.cost.Load = 300*time.Millisecond, 30*time.Millisecond
	}
	if *nMembers > 0 {
		p.members = *nMembers
	}
	if *nJobs > 0 {
		p.jobs = *nJobs
	}
	if *tokensPerS > 0 {
		p.cost.TokensPerSec = *tokensPerS
	}
	if *ackWait > 0 {
		p.ackWait = *ackWait
	}
	return p
}

var words = strings.Fields("the fleet pulls jobs from one durable consumer and every member embeds " +
	"what it fetched while peers share compiled engine shapes through a key value bucket " +
	"so that nobody compiles twice and no job is lost when a member goes away")

// corpus makes the backlog: jobs of one short text (about 20 words), and
// a long text (about 700 words) in the given share.
func corpus(n int, long float64) []*schema.Job {
	rng := rand.New(rand.NewPCG(17, 1))
	text := func(w int) string {
		var b strings.Builder
		for i := range w {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(words[rng.IntN(len(words))])
		}
		return b.String()
	}
	jobs := make([]*schema.Job, n)
	for i := range jobs {
		w := 16 + rng.IntN(8)
		if rng.Float64() < long {
			w = 650 + rng.IntN(100)
		}
		jobs[i] = schema.NewJob(fmt.Sprintf("j%07d", i), text(w))
	}
	return jobs
}

func benchLogger() *slog.Logger {
	if testing.Verbose() && os.Getenv("FLEET_DEBUG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// TestFleet is the scenario: the smoke run by default, the measured run
// with -fleet.full (make bench-fleet).
func TestFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster of nats-server processes")
	}
	p := planFromFlags()
	rep := &report{plan: p, loadStart: loadAvg(), started: time.Now()}
	cfg := jetstream.DefaultConfig()
	cfg.Replicas = 3
	cfg.Consumer.AckWait, cfg.Consumer.BackOff = p.ackWait, nil
	cfg.Consumer.MaxAckPending = *maxAckPend
	if cfg.Consumer.MaxAckPending <= 0 {
		cfg.Consumer.MaxAckPending = 64 * (p.members + p.members/2)
	}
	rep.maxAckPending = cfg.Consumer.MaxAckPending
	r := newRig(t, cfg)
	t.Logf("cluster up and provisioned in %v", time.Since(rep.started).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	jobs := corpus(p.jobs, p.long)
	start := time.Now()
	sent := r.push(ctx, jobs)
	rep.pushTook = time.Since(start)
	t.Logf("backlog of %d jobs stored in %v", len(sent), rep.pushTook.Round(time.Millisecond))

	env := &memberEnv{urls: r.urls, cfg: cfg, mf: openModel(t), cost: p.cost, plans: newPlanCache(),
		ledger: newLedger(), log: benchLogger(), prefetch: *prefetchMax,
		inFlight: *inFlight}
	f := &fleetRun{t: t, env: env, rep: rep}
	defer f.closeAll()
	f.drain(ctx, r, sent)
	warmStart := time.Now()
	f.warm(ctx)
	t.Logf("fleet part in %v", time.Since(warmStart).Round(time.Millisecond))

	seen, fates := env.ledger.snapshot()
	got := account(sent, r.storedResults(ctx), r.resultMsgID, seen, fates)
	rep.tally = got
	rep.ackLat = env.ledger.ackLatencies()
	rep.loadEnd = loadAvg()
	md := rep.markdown()
	t.Log("\n" + md)
	if *outFile != "" {
		if err := os.WriteFile(*outFile, []byte(md), 0o644); err != nil {
			t.Error(err)
		}
	}
	if got.Lost > 0 || got.StoredDuplicates > 0 || got.Strays > 0 {
		t.Errorf("results: %d lost, %d stored twice, %d strays; want none", got.Lost, got.StoredDuplicates, got.Strays)
	}
	if got.FromLive > 0 {
		t.Errorf("%d jobs redelivered although the member that had them stayed up", got.FromLive)
		logLiveRedeliveries(t, seen, fates)
	}
	if rep.lockedCompiles != 1 {
		t.Errorf("%d members wanting one shape at once compiled it %d times, want once", rep.wanters, rep.lockedCompiles)
	}
}

// fleetRun is the members of one run and what they were measured doing.
type fleetRun struct {
	t   testing.TB
	env *memberEnv
	rep *report

	mu      sync.Mutex
	members map[int]*member
	next    int
}

// startN starts n members, a few at a time, and returns their indexes.
func (f *fleetRun) startN(ctx context.Context, n int) []int {
	f.t.Helper()
	idxs := make([]int, n)
	f.mu.Lock()
	for i := range idxs {
		idxs[i] = f.next
		f.next++
	}
	if f.members == nil {
		f.members = map[int]*member{}
	}
	f.mu.Unlock()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	errs := make(chan error, n)
	for _, i := range idxs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			m, err := startMember(ctx, f.env, i)
			if err != nil {
				errs <- err
				return
			}
			f.mu.Lock()
			f.members[i] = m
			f.mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		f.t.Fatal(err)
	}
	return idxs
}

func (f *fleetRun) live() []*member {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*member
	for _, m := range f.members {
		out = append(out, m)
	}
	return out
}

func (f *fleetRun) remove(i int) *member {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.members[i]
	delete(f.members, i)
	return m
}

func (f *fleetRun) closeAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, m := range f.live() {
		wg.Go(func() { _ = m.stop(ctx) })
	}
	wg.Wait()
}

// logLiveRedeliveries shows a few jobs a live member had when they were
// delivered again: how long after the first delivery reached its consumer,
// and whether (and when) that first one was acked.
func logLiveRedeliveries(t testing.TB, jobs map[string][]delivery, fates map[int]fate) {
	n := 0
	for id, ds := range jobs {
		if len(ds) < 2 || fates[ds[0].member] != live || n >= 8 {
			continue
		}
		n++
		first, second := ds[0], ds[1]
		acked := "never"
		if !first.acked.IsZero() {
			acked = first.acked.Sub(first.received).Round(time.Millisecond).String()
		}
		t.Logf("job %s: delivery %d to m%03d, acked after %s; delivery %d to m%03d %v after the first reached its consumer",
			id, first.num, first.member, acked, second.num, second.member, second.received.Sub(first.received).Round(time.Millisecond))
	}
}
