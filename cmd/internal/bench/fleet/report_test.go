package fleet

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"
)

// report is what one run measured.
type report struct {
	plan          plan
	maxAckPending int
	started       time.Time
	loadStart     string
	loadEnd       string

	pushTook, startTook, steadyWindow, drainTook time.Duration
	steadyJobs                                   int
	shares                                       []int // acks of each initial member in the steady window
	added, killed, stopped                       int
	heldAtKill, heldAtStop                       int             // consumer-held jobs of the members just before
	takeWork                                     []time.Duration // start to first delivery of added members, sorted
	readyToWork                                  []time.Duration // StartWorker returned to first delivery, sorted
	selfCPU, serverCPU                           time.Duration
	nodeCPU                                      []time.Duration // each server's CPU over the drain
	nodeRoles                                    []string        // what each server leads
	ackLat                                       []time.Duration
	tally                                        tally

	warmMembers    int
	prewarm        []time.Duration // solo shape: compile done to each peer's pre-warm, sorted
	wanters        int
	lockedCompiles int // plan builds of the herd shape
	fleetCompiles  int64
	lockBusy       int64
	herdTook       time.Duration
	published      int64 // shape records the members' in-band runs created
	bucketKeys     int   // shape keys of the model and SM at the end
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func (r *report) markdown() string {
	var b strings.Builder
	p, t := r.plan, r.tally
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	w("Run of %s: %d CPUs (GOMAXPROCS %d), load average %s at the start, %s at the end.",
		r.started.UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), runtime.GOMAXPROCS(0), r.loadStart, r.loadEnd)
	w("Three nats-server processes (one cluster, R3 file-storage streams), %d members at the start, "+
		"%d jobs (%.0f%% with one ~1k-token text), MaxAckPending %d, AckWait %v.",
		p.members, t.Sent, p.long*100, r.maxAckPending, p.ackWait)
	if *prefetchMax > 0 || *inFlight > 0 {
		w("Per member: prefetch cap %d, in-flight tokens %d (0: defaults).", *prefetchMax, *inFlight)
	}
	w("Fake GPU per member: %.0f tokens/s + %v a run; source: %s.", p.cost.TokensPerSec, p.cost.Overhead, costSource)
	w("")
	w("| Figure | Value |")
	w("|---|---|")
	w("| backlog pushed (one producer, async publish) | %d jobs in %v (%.0f jobs/s) |", t.Sent, r.pushTook.Round(time.Millisecond), rate(t.Sent, r.pushTook))
	w("| %d members started (8 at a time) | %v |", p.members, r.startTook.Round(time.Millisecond))
	w("| cluster jobs/s, steady (%d members, first 40%% of the backlog) | %.0f |", p.members, rate(r.steadyJobs, r.steadyWindow))
	w("| cluster jobs/s, whole drain incl. churn | %.0f (%v) |", rate(t.Sent, r.drainTook), r.drainTook.Round(time.Millisecond))
	if len(r.shares) > 0 {
		lo, hi, mean := slices.Min(r.shares), slices.Max(r.shares), float64(r.steadyJobs)/float64(len(r.shares))
		w("| member share, steady: min / mean / max jobs | %d / %.0f / %d (min %.2f, max %.2f of the mean) |", lo, mean, hi, float64(lo)/mean, float64(hi)/mean)
	}
	w("| ack latency (delivery to ack) p50 / p99 | %s / %s |", ms(percentile(r.ackLat, 0.5)), ms(percentile(r.ackLat, 0.99)))
	w("| results stored / sent | %d / %d (lost %d, stored twice %d, strays %d) |", t.Stored, t.Sent, t.Lost, t.StoredDuplicates, t.Strays)
	w("| churn | +%d members, %d killed (connection closed, no drain), %d stopped (Worker.Stop) |", r.added, r.killed, r.stopped)
	w("| jobs held by the members when they were killed / stopped | %d / %d |", r.heldAtKill, r.heldAtStop)
	w("| jobs redelivered: started on a killed member / on a stopped one / on a live one / from a fetch buffer | %d / %d / %d / %d |",
		t.FromKilled, t.FromStopped, t.FromLive, t.FromBuffer)
	w("| jobs acked twice (work done twice) | %d |", t.DoubleAcked)
	if len(r.takeWork) > 0 {
		w("| new member: start to first job, p50 / max (of which StartWorker returned to first job) | %s / %s (%s / %s) |",
			ms(percentile(r.takeWork, 0.5)), ms(r.takeWork[len(r.takeWork)-1]),
			ms(percentile(r.readyToWork, 0.5)), ms(r.readyToWork[len(r.readyToWork)-1]))
	}
	w("| jetembed CPU per job (members' process) | %.0f µs (%v over the drain) |", perJob(r.selfCPU, t.Sent), r.selfCPU.Round(time.Millisecond))
	w("| nats-server CPU per job (3 processes) | %.0f µs (%v) |", perJob(r.serverCPU, t.Sent), r.serverCPU.Round(time.Millisecond))
	for i, c := range r.nodeCPU {
		role := r.nodeRoles[i]
		if role == "" {
			role = "follower only"
		}
		w("| node %d CPU over the drain (leads: %s) | %v (%.0f%% of the servers') |", i+1, role, c.Round(time.Millisecond), 100*c.Seconds()/max(r.serverCPU.Seconds(), 1e-9))
	}
	w("| shape compiled by one member: pre-warmed on the %d others, p50 / p99 | %s / %s |", len(r.prewarm), ms(percentile(r.prewarm, 0.5)), ms(percentile(r.prewarm, 0.99)))
	w("| %d members ask for one new shape at once | %d plan build(s), %d fleet compile(s), %d lock-busy waits, all warmed in %v |",
		r.wanters, r.lockedCompiles, r.fleetCompiles, r.lockBusy, r.herdTook.Round(time.Millisecond))
	w("| shape keys in the bucket (model, SM) / created by in-band runs | %d / %d |", r.bucketKeys, r.published)
	return b.String()
}

func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func perJob(d time.Duration, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(d.Microseconds()) / float64(n)
}
