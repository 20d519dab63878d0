package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
)

// GoalReindex bounds a re-index of an unchanged corpus with the cache on
// (issue 33): its wall time over the first run's.
const GoalReindex = 0.20

// repeatShare is the share of the texts of the repeats run that repeat an
// earlier text of the run.
const repeatShare = 0.10

// Reindex is the fleet's result cache (serve --cache kv) on the bulk
// corpus, three runs through one embedded nats-server with the cache
// bucket provisioned: First queues the corpus under new job ids and times
// a worker with the cache on from its start to the last result (every text
// runs and is stored); Again queues the same texts under new job ids and
// times a new worker the same way (every text should come from the
// cache); Repeats queues texts no earlier run had, Repeated of them copies
// of an earlier text of the run, cut into jobs the same way.
type Reindex struct {
	First, Again, Repeats CacheRun
	// Repeated counts the texts of Repeats that repeat an earlier one;
	// SameJob how many of them are in the job of the text they repeat
	// (deduplicated inside the job), the others in an earlier job.
	Repeated, SameJob int
}

// CacheRun is one timed run of the re-index measurement.
type CacheRun struct {
	Rate
	Jobs int
	// Distinct counts the distinct texts the run submitted.
	Distinct int
	// Ran counts the texts the engine ran (texts of its Embed calls) and
	// MaxRuns the most times one text ran.
	Ran, MaxRuns int
	// Cached sums usage.cached over the run's results: the texts the cache
	// answered.
	Cached int
	// Queued is how long queueing the jobs took (one Submit after
	// another, each waiting for its ack), before the timed run.
	Queued time.Duration
}

// Ratio is Again's wall time over First's.
func (r *Reindex) Ratio() float64 {
	return ratio(r.Again.Elapsed.Seconds(), r.First.Elapsed.Seconds())
}

// RatioQueued is Again's wall time over First's with the queueing of
// each counted in: a re-index submitted while the worker is idle.
func (r *Reindex) RatioQueued() float64 {
	return ratio((r.Again.Queued + r.Again.Elapsed).Seconds(), (r.First.Queued + r.First.Elapsed).Seconds())
}

// AgainMet says whether the re-index met its goals: at most GoalReindex of
// the first run's wall time, and no text run by the model.
func (r *Reindex) AgainMet() bool {
	return r.Again.Elapsed > 0 && r.Ratio() <= GoalReindex && r.Again.Ran == 0
}

// RepeatsMet says whether every distinct text of the repeats run ran once.
func (r *Reindex) RepeatsMet() bool {
	return r.Repeats.Ran == r.Repeats.Distinct && r.Repeats.MaxRuns == 1
}

// reindexRuns runs the three runs of [Reindex] on emb with jobs (the bulk
// corpus, cut into jobs) and cc; seed fixes the texts of the repeats run.
func reindexRuns(ctx context.Context, emb engine.Embedder, cc consumer.Config, jobs [][]string, seed uint64) (*Reindex, error) {
	var corpus []string
	for _, j := range jobs {
		corpus = append(corpus, j...)
	}
	fresh, firstOf := repeatCorpus(len(corpus), seed, corpus)
	repeats := Jobs(fresh, seed)
	r := &Reindex{}
	jobOf := make([]int, 0, len(fresh))
	for k, j := range repeats {
		for range j {
			jobOf = append(jobOf, k)
		}
	}
	for i, f := range firstOf {
		if f != i {
			r.Repeated++
			if jobOf[f] == jobOf[i] {
				r.SameJob++
			}
		}
	}
	err := withNATS(ctx, func(env *natsEnv) error {
		stopReading := env.readResults(ctx)
		defer stopReading()
		var err error
		if r.First, err = cacheRun(ctx, env, emb, cc, "first", jobs); err != nil {
			return fmt.Errorf("first run: %w", err)
		}
		if reindexProfile != nil {
			reindexProfile(true)
		}
		r.Again, err = cacheRun(ctx, env, emb, cc, "again", jobs)
		if reindexProfile != nil {
			reindexProfile(false)
		}
		if err != nil {
			return fmt.Errorf("re-index: %w", err)
		}
		if r.Repeats, err = cacheRun(ctx, env, emb, cc, "repeats", repeats); err != nil {
			return fmt.Errorf("repeats: %w", err)
		}
		return nil
	})
	return r, err
}

// reindexProfile, when a test sets it, is called with true right before
// the re-index run (queueing included) and with false right after it.
var reindexProfile func(start bool)

// cacheRun queues jobs under ids "<prefix>-<index>", then starts a worker
// with the cache on and times it until their last result is stored; the
// results reader must have started.
func cacheRun(ctx context.Context, env *natsEnv, emb engine.Embedder, cc consumer.Config, prefix string, jobs [][]string) (CacheRun, error) {
	var run CacheRun
	run.Jobs = len(jobs)
	distinct := map[string]struct{}{}
	for _, j := range jobs {
		run.Texts += len(j)
		for _, t := range j {
			distinct[t] = struct{}{}
		}
	}
	run.Distinct = len(distinct)
	done, cached := env.seen.count(), env.seen.cachedTexts()
	queued := time.Now()
	if err := env.queue(ctx, prefix, jobs); err != nil {
		return run, err
	}
	run.Queued = time.Since(queued)
	rc := &runCounter{Embedder: emb, runs: map[string]int{}}
	start := time.Now()
	stop, err := env.startCacheWorker(ctx, rc, cc)
	if err != nil {
		return run, err
	}
	defer stop()
	rctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	if err := env.waitResults(rctx, uint64(done+len(jobs))); err != nil {
		return run, err
	}
	run.Elapsed = time.Since(start)
	run.Cached = env.seen.cachedTexts() - cached
	run.Ran, run.MaxRuns, run.Tokens, run.Padded = rc.totals()
	return run, nil
}

// repeatCorpus returns n texts none of which is in old, of which
// repeatShare are copies of an earlier text of theirs, at positions fixed
// by seed; firstOf[i] is the first position of text i's value.
func repeatCorpus(n int, seed uint64, old []string) (texts []string, firstOf []int) {
	had := make(map[string]struct{}, len(old)+n)
	for _, t := range old {
		had[t] = struct{}{}
	}
	// New texts from another seed, none in old nor twice.
	for s := seed + 1; len(texts) < n; s++ {
		for _, t := range Corpus(n, s^0x7265706561747300) {
			if _, ok := had[t]; ok || len(texts) == n {
				continue
			}
			had[t] = struct{}{}
			texts = append(texts, t)
		}
	}
	firstOf = make([]int, n)
	for i := range firstOf {
		firstOf[i] = i
	}
	if n < 2 {
		return texts, firstOf
	}
	r := rand.New(rand.NewPCG(seed, 0x72657065617473))
	at := r.Perm(n - 1)[:int(float64(n)*repeatShare)]
	sort.Ints(at)
	for _, p := range at {
		i := p + 1 // never the first text
		j := r.IntN(i)
		texts[i], firstOf[i] = texts[j], firstOf[j]
	}
	return texts, firstOf
}

// runCounter wraps an embedder and counts the texts it ran, each text's
// runs and the tokens.
type runCounter struct {
	engine.Embedder
	mu                  sync.Mutex
	runs                map[string]int
	ran, tokens, padded int
}

func (c *runCounter) Embed(ctx context.Context, texts []engine.Text, call engine.Call) ([]engine.Embedding, engine.CallReport, error) {
	embs, rep, err := c.Embedder.Embed(ctx, texts, call)
	c.mu.Lock()
	c.ran += len(texts)
	for _, t := range texts {
		c.runs[t.Text]++
	}
	c.tokens += rep.Tokens
	c.padded += rep.PaddedTokens
	c.mu.Unlock()
	return embs, rep, err
}

func (c *runCounter) totals() (ran, maxRuns, tokens, padded int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.runs {
		maxRuns = max(maxRuns, n)
	}
	return c.ran, maxRuns, c.tokens, c.padded
}
