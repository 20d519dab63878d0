package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/schema"
)

// maxLatencyRun bounds one latency measurement; requestEvery paces its
// requests.
const (
	maxLatencyRun = time.Minute
	requestEvery  = 200 * time.Millisecond
)

// shortText is the one short text of the latency measurements.
const shortText = "how do I reset my password?"

// Latency is the request-reply latency of one short text, as p50 and p99,
// next to the engine's own run time for it.
type Latency struct {
	Requests int
	// Engine is the p50 of bare Engine.Embed calls of the text, made
	// alternately with the requests.
	Engine time.Duration
	// P50 and P99 are of the whole request through NATS.
	P50, P99 time.Duration
	// LoadTexts is the background bulk rate in texts/s (0: idle);
	// LoadJobs the jobs it queued and LoadDone those whose results were
	// stored by the end: a gap means a backlog built up.
	LoadTexts          float64
	LoadJobs, LoadDone int
	// Refused counts requests answered overloaded (not in the percentiles).
	Refused int
}

// Added returns the p50 and p99 latency added to the engine's run time.
func (l Latency) Added() (p50, p99 time.Duration) { return l.P50 - l.Engine, l.P99 - l.Engine }

// percentile returns the p-th percentile (0..1) of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted)-1) + 0.5)
	return sorted[i]
}

// engineOnce times one bare Embed call of shortText.
func engineOnce(ctx context.Context, e *engine.Engine) (time.Duration, error) {
	in := []engine.Text{{Text: shortText, Outputs: engine.Dense, Truncate: true}}
	start := time.Now()
	// In the interactive class, as a request is: the bare call's time is
	// the engine's own, not a wait behind the background bulk.
	embs, _, err := e.Embed(engine.WithInteractive(ctx), in)
	if err != nil {
		return 0, err
	}
	if embs[0].Err != nil {
		return 0, embs[0].Err
	}
	return time.Since(start), nil
}

// requestLatency measures n sequential requests of shortText through the
// request-reply service of a worker on e, while a producer queues bulk jobs
// at loadTexts texts/s (0: none).
func requestLatency(ctx context.Context, e *engine.Engine, cc consumer.Config, n int, loadTexts float64, jobs [][]string) (Latency, error) {
	l := Latency{Requests: n, LoadTexts: loadTexts}
	err := withNATS(ctx, func(env *natsEnv) error {
		stop, err := env.startWorker(ctx, e, cc)
		if err != nil {
			return err
		}
		defer stop()
		// A few requests first, so the service and the shapes are warm.
		for range 5 {
			if _, err := env.client.Embed(ctx, shortText); err != nil {
				return err
			}
		}
		lctx, stopLoad := context.WithCancel(ctx)
		var wg sync.WaitGroup
		var loadErr error
		if loadTexts > 0 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l.LoadJobs, loadErr = produce(lctx, env, jobs, loadTexts)
			}()
		}
		d, bare, reqErr := timeRequests(ctx, env, e, n, &l)
		stopLoad()
		wg.Wait()
		if reqErr != nil {
			return reqErr
		}
		if loadErr != nil {
			return loadErr
		}
		done, err := env.results(ctx)
		if err != nil {
			return err
		}
		l.LoadDone = int(done)
		l.Requests = len(d)
		l.P50, l.P99 = percentile(d, 0.5), percentile(d, 0.99)
		l.Engine = percentile(bare, 0.5)
		return nil
	})
	return l, err
}

// produce queues jobs (cycling through them) at about rate texts/s until
// ctx ends, and returns how many it queued.
func produce(ctx context.Context, env *natsEnv, jobs [][]string, rate float64) (int, error) {
	start := time.Now()
	sent := 0
	for i := 0; ; i++ {
		texts := jobs[i%len(jobs)]
		// Pace by texts: job i may go once the texts before it are due.
		due := start.Add(time.Duration(float64(sent) / rate * float64(time.Second)))
		select {
		case <-ctx.Done():
			return i, nil
		case <-time.After(time.Until(due)):
		}
		if _, err := env.client.Submit(ctx, schema.NewJob(fmt.Sprintf("load-%d", i), texts...)); err != nil {
			if ctx.Err() != nil {
				return i, nil
			}
			return i, err
		}
		sent += len(texts)
	}
}

// timeRequests makes up to n paced request-reply calls of shortText, each
// after a bare Embed of it, and returns both durations, sorted. Bare calls
// and requests alternate, so that both see the same load from the machine
// and from the background bulk. Under load a request may wait behind bulk
// chunks, so the run is bounded in time (maxLatencyRun); a request
// answered overloaded counts in l.Refused.
func timeRequests(ctx context.Context, env *natsEnv, e *engine.Engine, n int, l *Latency) (d, bare []time.Duration, err error) {
	d = make([]time.Duration, 0, n)
	bare = make([]time.Duration, 0, n)
	deadline := time.Now().Add(maxLatencyRun)
	next := time.Now()
	for range n {
		if time.Now().After(deadline) {
			break
		}
		// Paced, so that the loaded run lasts long enough for the
		// background bulk to matter.
		time.Sleep(time.Until(next))
		next = time.Now().Add(requestEvery)
		b, err := engineOnce(ctx, e)
		if err != nil {
			return nil, nil, fmt.Errorf("bare call: %w", err)
		}
		bare = append(bare, b)
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		start := time.Now()
		res, err := env.client.Embed(rctx, shortText)
		cancel()
		if res != nil && res.Error != nil && res.Error.Code == schema.CodeOverloaded {
			l.Refused++
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("request: %w", err)
		}
		d = append(d, time.Since(start))
	}
	slices.Sort(d)
	slices.Sort(bare)
	return d, bare, nil
}
