package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// Per-tenant fairness (issue 32): tenant B's jobs while tenant A has a
// backlog queued, with one consumer of every tenant's jobs and with
// per-tenant consumers (`jetembed provision --per-tenant`), and the split
// of the engine between two backlogged tenants of weights 3 and 1.
const (
	// fairIdleJobs are B's jobs before A's backlog: its idle latency.
	fairIdleJobs = 5
	// fairBJobs bounds B's jobs under the backlog; they stop when A's
	// backlog is done.
	fairBJobs = 12
	// fairBoundedInFlight is the engine's bulk budget of the bounded mode
	// and of the weights run, as the end-to-end proofs run serve
	// (--in-flight-tokens 512, cmd/jetembed/fairshare_e2e_test.go).
	fairBoundedInFlight = 512
	// fairWords bounds the words of the backlog's texts: the corpus's
	// short and medium texts, so that a backlog of hundreds of jobs drains
	// in seconds on a CPU.
	fairWords = 40
	fairRun   = "fair"
)

// The tenants of the runs, and the weights of the weights run (serve
// --tenant-weight wa=3,wb=1; the latency runs' tenants weigh 1).
const (
	tenantA, tenantB   = "a", "b"
	weightedA          = "wa"
	weightedB          = "wb"
	weightA, weightB   = 3, 1
	goalSplitTolerance = 0.10
)

func fairWeights() map[string]int { return map[string]int{weightedA: weightA, weightedB: weightB} }

// Fairness is tenant B's latency under tenant A's backlog in one mode.
type Fairness struct {
	// Mode names it; PerTenant is per-tenant consumers (else one consumer
	// of every job); InFlight is the engine's bulk budget (tokens).
	Mode      string
	PerTenant bool
	InFlight  int
	// Backlog is A's one-text jobs, BacklogTokens their real tokens;
	// Drain is from A's first publish to its last result stored.
	Backlog, BacklogTokens int
	Drain                  time.Duration
	// Idle are B's job latencies (publish to result stored) before the
	// backlog, Under those while A's backlog was served; both sorted.
	Idle, Under []time.Duration
	// Ahead is the mean of A's results stored while one of B's jobs
	// waited.
	Ahead float64
	// Chunk is the mean session run (time in Run / runs) during the
	// backlog.
	Chunk time.Duration
}

// P50 and P99 are of B's jobs under the backlog.
func (f Fairness) P50() time.Duration { return percentile(f.Under, 0.5) }
func (f Fairness) P99() time.Duration { return percentile(f.Under, 0.99) }

// IdleP99 is B's idle job latency p99.
func (f Fairness) IdleP99() time.Duration { return percentile(f.Idle, 0.99) }

// Bound is the goal of issue 32: B's idle latency plus two chunk times
// (the engine's chunk cap, engine.DefaultMaxChunkLatency, serve's
// --max-chunk-latency default).
func (f Fairness) Bound() time.Duration { return f.IdleP99() + 2*engine.DefaultMaxChunkLatency }

// Met says B's p99 under the backlog is within the bound.
func (f Fairness) Met() bool { return len(f.Under) > 0 && f.P99() <= f.Bound() }

// Weighted is the split of the engine between two backlogged tenants of
// weights 3 and 1 (per-tenant consumers, both the pulling and the
// engine's admission weighing them).
type Weighted struct {
	// Jobs is each tenant's queued one-text jobs; Window the results
	// counted: stored after both tenants had one, up to Jobs results in
	// all (so both still had jobs queued); InFlight the engine's bulk
	// budget (tokens).
	Jobs, Window, InFlight int
	// Results and Tokens are A's and B's in the window (real tokens).
	Results, Tokens [2]int
}

// Split is A's real tokens over B's in the window.
func (w Weighted) Split() float64 { return ratio(float64(w.Tokens[0]), float64(w.Tokens[1])) }

// Met says the split is the weights' within goalSplitTolerance.
func (w Weighted) Met() bool {
	want := float64(weightA) / float64(weightB)
	return w.Split() >= want*(1-goalSplitTolerance) && w.Split() <= want*(1+goalSplitTolerance)
}

// fairTexts are the backlog's texts: the corpus's of at most fairWords
// words (the corpus itself if it has none).
func fairTexts(corpus []string) []string {
	var out []string
	for _, t := range corpus {
		if len(strings.Fields(t)) <= fairWords {
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return corpus
	}
	return out
}

// fairJobs is the size of A's backlog: twice the corpus, between 300 and
// 2,000 one-text jobs.
func fairJobs(texts int) int { return min(max(2*texts, 300), 2000) }

// fairRuns measures B's latency under A's backlog in three modes (one
// consumer and per-tenant consumers at serve's default budget, per-tenant
// consumers with a bounded budget), then the weights run, on an engine
// opened as serve opens it with --tenant-weight.
func (u *suite) fairRuns(ctx context.Context) error {
	r := u.r
	e, err := u.s.openWeighted(ctx, fairWeights())
	if err != nil {
		return err
	}
	defer e.Close()
	texts := fairTexts(u.corpus)
	if _, err := bareEngine(ctx, e, fixedCalls(texts[:min(len(texts), engineCallTexts)], engineCallTexts), 2); err != nil {
		return fmt.Errorf("fairness warm pass: %w", err)
	}
	n := fairJobs(len(u.corpus))
	modes := []struct {
		name      string
		perTenant bool
		inFlight  int
	}{
		{"one consumer", false, 0},
		{"per-tenant consumers", true, 0},
		{"per-tenant consumers, bounded budget", true, fairBoundedInFlight},
	}
	for _, m := range modes {
		f, err := u.fairRun(ctx, e, m.name, m.perTenant, m.inFlight, texts, n)
		if err != nil {
			return fmt.Errorf("fairness, %s: %w", m.name, err)
		}
		r.Fair = append(r.Fair, f)
		u.logf("fairness, %s (budget %d): A's %d jobs drained in %v; B idle p99 %v, under the backlog %d jobs p50 %v p99 %v (goal %v), %.0f of A's results ahead of each; mean chunk %v",
			m.name, f.InFlight, f.Backlog, f.Drain.Round(time.Millisecond), f.IdleP99().Round(time.Millisecond), len(f.Under),
			f.P50().Round(time.Millisecond), f.P99().Round(time.Millisecond), f.Bound().Round(time.Millisecond), f.Ahead, f.Chunk.Round(time.Millisecond))
	}
	if r.Weighted, err = u.weightedRun(ctx, e, texts, n/2); err != nil {
		return fmt.Errorf("fairness, weights: %w", err)
	}
	w := r.Weighted
	u.logf("fairness, weights %d:%d: %d results in the window, A %d (%d tokens), B %d (%d tokens): split %.2f",
		weightA, weightB, w.Window, w.Results[0], w.Tokens[0], w.Results[1], w.Tokens[1], w.Split())
	return nil
}

// withBudget sets e's bulk budget to inFlight (0: keep it) for the run of
// f and returns the budget in force.
func withBudget(e *engine.Engine, inFlight int, f func(budget int) error) error {
	prev, _ := e.Budgets()
	if inFlight <= 0 {
		return f(prev)
	}
	if _, _, err := e.SetBudgets(inFlight, 0); err != nil {
		return err
	}
	defer e.SetBudgets(prev, 0)
	return f(inFlight)
}

func perTenantConfig(on bool) func(*jetstream.Config) {
	return func(c *jetstream.Config) { c.Consumer.PerTenant = on }
}

// fairRun is one mode: B's idle jobs, then A's backlog of n one-text jobs
// published at once while the worker runs, and B's jobs one at a time,
// spaced over what is left of the backlog, until it is done.
func (u *suite) fairRun(ctx context.Context, e *engine.Engine, mode string, perTenant bool, inFlight int, texts []string, n int) (Fairness, error) {
	f := Fairness{Mode: mode, PerTenant: perTenant, Backlog: n}
	err := withBudget(e, inFlight, func(budget int) error {
		f.InFlight = budget
		return withNATSConfig(ctx, perTenantConfig(perTenant), func(env *natsEnv) error {
			ca, ra, stopA, err := tenantClient(ctx, env, tenantA)
			if err != nil {
				return err
			}
			defer stopA()
			cb, rb, stopB, err := tenantClient(ctx, env, tenantB)
			if err != nil {
				return err
			}
			defer stopB()
			stop, err := env.startWorker(ctx, e, u.cc)
			if err != nil {
				return err
			}
			defer stop()
			job := func(id string) (time.Duration, error) {
				start := time.Now()
				if _, err := cb.Submit(ctx, schema.NewJob(id, shortText)); err != nil {
					return 0, err
				}
				wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
				defer cancel()
				if err := rb.wait(wctx, id); err != nil {
					return 0, err
				}
				return time.Since(start), nil
			}
			// A first job of each tenant makes its consumer (per-tenant
			// mode: a member finds a new tenant at its next refresh).
			for _, c := range []*client.Client{ca, cb} {
				if _, err := c.Submit(ctx, schema.NewJob("first", shortText)); err != nil {
					return err
				}
			}
			for _, r := range []*tenantReader{ra, rb} {
				wctx, cancel := context.WithTimeout(ctx, time.Minute)
				err := r.waitCount(wctx, 1)
				cancel()
				if err != nil {
					return fmt.Errorf("a tenant's first job: %w", err)
				}
			}
			for i := range fairIdleJobs {
				d, err := job(fmt.Sprintf("idle-%d", i))
				if err != nil {
					return fmt.Errorf("tenant B's idle job: %w", err)
				}
				f.Idle = append(f.Idle, d)
			}
			ra.reset()
			busy0, runs0 := sessionBusy(e), sessionRuns(e)
			began := time.Now()
			for i := range n {
				if _, err := ca.Submit(ctx, schema.NewJob(fmt.Sprintf("a-%d", i), texts[i%len(texts)])); err != nil {
					return fmt.Errorf("tenant A's job %d: %w", i, err)
				}
			}
			// B's first job goes as soon as A's backlog is published;
			// the others are spaced over what is left of it at the rate
			// A's results came so far, until it is done.
			ahead := 0
			every := 100 * time.Millisecond
			for i := 0; i < fairBJobs && (i == 0 || ra.count() < n); i++ {
				before := ra.count()
				d, err := job(fmt.Sprintf("b-%d", i))
				if err != nil {
					return fmt.Errorf("tenant B's job under the backlog: %w", err)
				}
				f.Under = append(f.Under, d)
				ahead += ra.count() - before
				if i == 0 {
					if done := ra.count(); done > 0 && done < n {
						left := time.Duration(float64(time.Since(began)) / float64(done) * float64(n-done))
						every = max(left/fairBJobs, 10*time.Millisecond)
					}
				}
				time.Sleep(max(every-d, 0))
			}
			wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
			defer cancel()
			if err := ra.waitCount(wctx, n); err != nil {
				return fmt.Errorf("tenant A's backlog: %w", err)
			}
			f.Drain = ra.lastAt().Sub(began)
			if runs := sessionRuns(e) - runs0; runs > 0 {
				f.Chunk = (sessionBusy(e) - busy0) / time.Duration(runs)
			}
			f.BacklogTokens = ra.tokens()
			f.Ahead = ratio(float64(ahead), float64(len(f.Under)))
			slices.Sort(f.Idle)
			slices.Sort(f.Under)
			return nil
		})
	})
	return f, err
}

// weightedRun queues jobs one-text jobs for each of two tenants of weights
// 3 and 1, then starts a worker with those shares on per-tenant
// consumers, and counts the real tokens of each tenant's results stored
// after both had one, up to jobs results in all: both still have jobs
// queued, whatever the split.
func (u *suite) weightedRun(ctx context.Context, e *engine.Engine, texts []string, jobs int) (Weighted, error) {
	w := Weighted{Jobs: jobs}
	err := withBudget(e, fairBoundedInFlight, func(budget int) error {
		w.InFlight = budget
		return withNATSConfig(ctx, perTenantConfig(true), func(env *natsEnv) error {
			var readers [2]*tenantReader
			for k, tenant := range []string{weightedA, weightedB} {
				c, rd, stop, err := tenantClient(ctx, env, tenant)
				if err != nil {
					return err
				}
				defer stop()
				readers[k] = rd
				for i := range jobs {
					if _, err := c.Submit(ctx, schema.NewJob(fmt.Sprintf("%s-%d", tenant, i), texts[i%len(texts)])); err != nil {
						return fmt.Errorf("%s's job %d: %w", tenant, i, err)
					}
				}
			}
			fair := jetstream.FairConfig{Shares: jetstream.Shares{Weights: fairWeights()}}
			stop, err := env.startFair(ctx, e, u.cc, fair)
			if err != nil {
				return err
			}
			defer stop()
			wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
			defer cancel()
			for readers[0].count()+readers[1].count() < jobs {
				select {
				case <-wctx.Done():
					return fmt.Errorf("%d of %d results: %w", readers[0].count()+readers[1].count(), jobs, wctx.Err())
				case <-time.After(10 * time.Millisecond):
				}
			}
			type res struct {
				k int
				stored
			}
			var all []res
			for k, rd := range readers {
				for _, s := range rd.snapshot() {
					all = append(all, res{k, s})
				}
			}
			slices.SortFunc(all, func(a, b res) int { return cmp.Compare(a.seq, b.seq) })
			all = all[:min(len(all), jobs)]
			// The window starts after both tenants have a result.
			var seen [2]bool
			from := len(all)
			for i, x := range all {
				seen[x.k] = true
				if seen[0] && seen[1] {
					from = i + 1
					break
				}
			}
			for _, x := range all[from:] {
				w.Results[x.k]++
				w.Tokens[x.k] += x.tokens
			}
			w.Window = len(all) - from
			return nil
		})
	})
	return w, err
}

// sessionRuns sums the sessions' runs.
func sessionRuns(e *engine.Engine) int64 {
	var n int64
	for _, s := range e.Stats().Sessions {
		n += s.Runs
	}
	return n
}

// stored is one result as a tenant's reader saw it.
type stored struct {
	at     time.Time
	seq    uint64
	tokens int
}

// tenantReader records the results of one tenant's run as they are stored
// (a push consumer of the client's), by job id.
type tenantReader struct {
	mu   sync.Mutex
	got  map[string]stored
	last time.Time
	ch   chan struct{}
}

// tenantClient is a producer client of tenant (jobs on
// embed.jobs.<tenant>.fair.<id>, replies on embed.results.<tenant>.fair.<id>)
// and a reader of its results; stop ends the reader.
func tenantClient(ctx context.Context, env *natsEnv, tenant string) (*client.Client, *tenantReader, func(), error) {
	c, err := env.newClient(client.WithTenant(tenant), client.WithRun(fairRun))
	if err != nil {
		return nil, nil, nil, err
	}
	r := &tenantReader{got: map[string]stored{}, ch: make(chan struct{}, 1)}
	rctx, cancel := context.WithCancel(ctx)
	read := make(chan struct{})
	go func() {
		defer close(read)
		for res, err := range c.Results(rctx, fairRun) {
			if err != nil || res.Result == nil {
				continue
			}
			r.add(res.ID, stored{at: time.Now(), seq: res.Sequence, tokens: res.Usage.Tokens})
		}
	}()
	return c, r, func() { cancel(); <-read }, nil
}

func (r *tenantReader) add(id string, s stored) {
	r.mu.Lock()
	if _, dup := r.got[id]; !dup {
		r.got[id] = s
		r.last = s.at
	}
	r.mu.Unlock()
	select {
	case r.ch <- struct{}{}:
	default:
	}
}

// reset forgets the results read so far.
func (r *tenantReader) reset() {
	r.mu.Lock()
	clear(r.got)
	r.mu.Unlock()
}

func (r *tenantReader) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

func (r *tenantReader) lastAt() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

func (r *tenantReader) tokens() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.got {
		n += s.tokens
	}
	return n
}

func (r *tenantReader) snapshot() []stored {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]stored, 0, len(r.got))
	for _, s := range r.got {
		out = append(out, s)
	}
	return out
}

// until waits until ok holds, woken by each new result; one waiter at a
// time.
func (r *tenantReader) until(ctx context.Context, ok func() bool, what string) error {
	for !ok() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-r.ch:
		}
	}
	return nil
}

// wait waits for the result of job id.
func (r *tenantReader) wait(ctx context.Context, id string) error {
	return r.until(ctx, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		_, ok := r.got[id]
		return ok
	}, "result of "+id)
}

// waitCount waits for n results.
func (r *tenantReader) waitCount(ctx context.Context, n int) error {
	return r.until(ctx, func() bool { return r.count() >= n }, fmt.Sprintf("%d results", n))
}
