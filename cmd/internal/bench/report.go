package bench

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/jetembed/jetembed/engine"
)

// Goals of issues 8 and 13, each checked in the table.
const (
	GoalEfficiency = 0.97 // pipeline / bare engine texts/s
	GoalOverhead   = 0.05 // loop time per text / engine time per text
	GoalNaive      = 3.0  // pipeline / naive texts/s
	GoalPeer       = 1.2  // jetembed engine / best peer texts/s
	GoalPacking    = 0.97 // real / padded tokens of the bare engine on CPU
	// GoalNoopPath bounds the no-op engine through NATS against the bare
	// no-op engine (issue 31): on a GPU host the engine does thousands of
	// texts a second, so this path is the ceiling.
	GoalNoopPath = 0.6
	// GoalIdleP50 bounds the idle request-reply added latency p50;
	// GoalBacklogSlack is what a request under a bulk backlog may add to
	// the idle p99 beyond one chunk (engine.DefaultMaxChunkLatency).
	GoalIdleP50      = time.Millisecond
	GoalBacklogSlack = 50 * time.Millisecond
)

// Efficiency is pipeline texts/s over bare engine texts/s.
func (r *Report) Efficiency() float64 { return ratio(r.Pipeline.PerSecond(), r.Engine.PerSecond()) }

// Overhead is the time per text of the full loop around a no-op engine as a
// share of the real engine's time per text (engine texts/s over no-op
// pipeline texts/s).
func (r *Report) Overhead() float64 { return ratio(r.Engine.PerSecond(), r.Noop.PerSecond()) }

// NoopPath is the no-op engine's texts/s through NATS over the bare no-op
// engine's, each the best of its alternating rounds.
func (r *Report) NoopPath() float64 { return ratio(r.Noop.PerSecond(), r.NoopEngine.PerSecond()) }

// OverNaive is pipeline texts/s over the naive baseline's.
func (r *Report) OverNaive() float64 { return ratio(r.Pipeline.PerSecond(), r.Naive.PerSecond()) }

// OverPeer is jetembed's bare engine over the peer's best batch size, on the
// peer's texts; 0 without a peer.
func (r *Report) OverPeer() float64 {
	if r.Peer == nil {
		return 0
	}
	return ratio(r.PeerEngine.PerSecond(), r.Peer.Best().TextsPerS)
}

// denseFLOPs is the floating-point operations per token of an encoder's
// dense layers: per layer the Q, K, V and output projections (4h^2
// multiply-adds) and the feed-forward pair (2 h x intermediate).
func denseFLOPs(layers, hidden, intermediate int) float64 {
	h, i := float64(hidden), float64(intermediate)
	return 2 * float64(layers) * (4*h*h + 2*h*i)
}

// GFLOPsPerCore is the dense-layer arithmetic rate of tokens run in d
// over cores, in GFLOP/s per core.
func (r *Report) GFLOPsPerCore(tokens int, d time.Duration) float64 {
	cores := r.Config.Sessions * r.Config.Threads
	if d <= 0 || cores == 0 {
		return 0
	}
	return float64(tokens) * r.DenseFLOPs / d.Seconds() / float64(cores) / 1e9
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

func rounds(rates []float64) string {
	var b strings.Builder
	for i, x := range rates {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%.1f", x)
	}
	return b.String()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

// Markdown writes the results: the goal table first, then the raw rates
// every ratio comes from.
func (r *Report) Markdown(w io.Writer) error {
	c := r.Config
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("Model `%s` (%s); %d session(s) x %d intra-op thread(s); corpus of %d texts in %d jobs (seed %d); run took %s.\n\n",
		r.ModelID, c.ModelDir, c.Sessions, c.Threads, r.Engine.Texts, r.Jobs, c.Seed, r.Took.Round(time.Second))

	p("| Measure | Result | Goal | |\n|---|---|---|---|\n")
	p("| Pipeline efficiency (NATS bulk texts/s / bare engine texts/s) | %.3f | >= %.2f | %s |\n",
		r.Efficiency(), GoalEfficiency, verdict(r.Efficiency() >= GoalEfficiency))
	p("| Loop overhead (no-op engine loop time per text / engine time per text) | %.2f%% | < %.0f%% | %s |\n",
		100*r.Overhead(), 100*GoalOverhead, verdict(r.Overhead() < GoalOverhead))
	p("| No-op path: no-op engine through NATS / bare no-op engine, texts/s | %.2f (%.0f / %.0f%s) | >= %.1f | %s |\n",
		r.NoopPath(), r.Noop.PerSecond(), r.NoopEngine.PerSecond(), noopCPU(r), GoalNoopPath, verdict(r.NoopPath() >= GoalNoopPath))
	p("| Pipeline / naive baseline (one session run per job) | %.2fx | >= %.0fx | %s |\n",
		r.OverNaive(), GoalNaive, verdict(r.OverNaive() >= GoalNaive))
	if r.Peer != nil {
		b := r.Peer.Best()
		p("| jetembed engine / transformers.js best (batch %d) | %.2fx | >= %.1fx | %s |\n",
			b.Batch, r.OverPeer(), GoalPeer, verdict(r.OverPeer() >= GoalPeer))
	} else if r.PeerErr != nil {
		p("| jetembed / transformers.js | not measured: %v | >= %.1fx | **missed** |\n", r.PeerErr, GoalPeer)
	}
	p("| Packing: real/padded tokens, packer vs arrival-order batches of %d | %.3f vs %.3f | >= %.2f | %s |\n",
		arrivalBatch, r.Engine.Fill(), r.Arrival.Fill(), GoalPacking, verdict(r.Engine.Fill() >= GoalPacking))
	p("| Packing: bare engine texts/s / arrival-order texts/s | %.2fx | | |\n", ratio(r.Engine.PerSecond(), r.Arrival.PerSecond()))
	i50, i99 := r.Idle.Added()
	p("| Request-reply added latency, one short text, idle: p50 / p99 | %s / %s | p50 <= %s | %s |\n", ms(i50), ms(i99), ms(GoalIdleP50), verdict(i50 <= GoalIdleP50))
	l50, l99 := r.Loaded.Added()
	p("| Request-reply added latency, 50%% load (%.0f texts/s): p50 / p99 | %s / %s | | |\n", r.Loaded.LoadTexts, ms(l50), ms(l99))
	b50, b99 := r.Backlog.Added()
	bound := i99 + engine.DefaultMaxChunkLatency + GoalBacklogSlack
	p("| Request-reply added latency under a bulk backlog (producer at %.0f texts/s, %d of %d jobs done at the end): p50 / p99, refused | %s / %s, %d refused | p99 <= %s (idle p99 + max-chunk-latency + %s), 0 refused | %s |\n",
		r.Backlog.LoadTexts, r.Backlog.LoadDone, r.Backlog.LoadJobs, ms(b50), ms(b99), r.Backlog.Refused, ms(bound), ms(GoalBacklogSlack), verdict(b99 <= bound && r.Backlog.Refused == 0))
	if g := r.Gateway; g.Calls > 0 {
		a50, a99 := g.Added()
		p("| HTTP gateway / bare request-reply, one short text: calls/s with %d callers (ratio), added latency p50 / p99 | %.0f / %.0f (%.2f), %s / %s | reported | |\n",
			g.Callers, g.HTTPRate, g.BareRate, g.Ratio(), ms(a50), ms(a99))
	}
	if x := r.Reindex; x != nil {
		p("| Re-index: the same %d texts (%d jobs) again under new job ids, cache on (serve --cache kv): wall time / the first run's | %.3f (%.2f s / %.2f s; %.3f with the queueing of each counted in) | <= %.2f | %s |\n",
			x.Again.Texts, x.Again.Jobs, x.Ratio(), x.Again.Elapsed.Seconds(), x.First.Elapsed.Seconds(), x.RatioQueued(), GoalReindex, verdict(x.Again.Elapsed > 0 && x.Ratio() <= GoalReindex))
		p("| Re-index: texts the model ran in the second run (usage.cached: %d of %d) | %d | 0 | %s |\n",
			x.Again.Cached, x.Again.Texts, x.Again.Ran, verdict(x.Again.Ran == 0))
		p("| Repeats: %d new texts, %.0f%% of them (%d) repeating an earlier text of the run (%d in its job, %d in another job): texts the model ran / distinct texts, most runs of one text | %d / %d, %d | each distinct text once | %s |\n",
			x.Repeats.Texts, 100*repeatShare, x.Repeated, x.SameJob, x.Repeated-x.SameJob, x.Repeats.Ran, x.Repeats.Distinct, x.Repeats.MaxRuns, verdict(x.RepeatsMet()))
	}
	r.fairRows(p)
	p("| Session busy fraction during the best bulk run (time in Run / wall / sessions) | %.3f | reported | |\n", r.Busy)
	p("| Peak RSS of the bulk run (VmHWM) / RSS before it | %d MiB / %d MiB | bounded by the in-flight budget | |\n\n",
		r.Pipeline.PeakRSS>>20, r.Pipeline.BaseRSS>>20)

	cpuOf := "the whole process's, the embedded nats-server's included"
	if r.ServerProcess {
		cpuOf = "this process's only: the nats-server ran as a process of its own ($JETEMBED_BENCH_SERVER_PROCESS)"
	}
	p("Raw measurements (CPU: %s, over the timed run):\n\n| Contender | Texts | Seconds | Texts/s | Real/padded tokens | Cores busy, CPU µs a text |\n|---|---|---|---|---|---|\n", cpuOf)
	row := func(name string, x Rate) {
		fill, cpu := "n/a", "n/a"
		if x.Padded > 0 {
			fill = fmt.Sprintf("%d / %d (%.3f)", x.Tokens, x.Padded, x.Fill())
		}
		if x.CPU > 0 && x.Texts > 0 {
			cpu = fmt.Sprintf("%.2f, %.1f", x.Cores(), x.CPUPerText())
		}
		p("| %s | %d | %.2f | %.1f | %s | %s |\n", name, x.Texts, x.Elapsed.Seconds(), x.PerSecond(), fill, cpu)
	}
	row(fmt.Sprintf("bare engine, one call per job (%d calls at once, as the consumer makes them; best of rounds: %s)", r.EngineCalls, rounds(r.EngineRounds)), r.Engine)
	row(fmt.Sprintf("pipeline through NATS, queue pre-filled (best of rounds: %s)", rounds(r.PipelineRounds)), r.Pipeline.Rate)
	row("naive: one session run per job through NATS", r.Naive.Rate)
	row(fmt.Sprintf("arrival-order batches of %d on bare sessions", arrivalBatch), r.Arrival)
	if x := r.Reindex; x != nil {
		row(fmt.Sprintf("cache on, first run (queueing took %.2f s before it)", x.First.Queued.Seconds()), x.First.Rate)
		row(fmt.Sprintf("cache on, the same texts under new job ids (queueing %.2f s)", x.Again.Queued.Seconds()), x.Again.Rate)
		row(fmt.Sprintf("cache on, new texts with %d repeats (queueing %.2f s)", x.Repeated, x.Repeats.Queued.Seconds()), x.Repeats.Rate)
	}
	row(fmt.Sprintf("no-op engine, bare (one call per job; best of rounds: %s)", rounds(r.NoopEngineRounds)), r.NoopEngine)
	row(fmt.Sprintf("no-op engine through NATS (best of rounds: %s)", rounds(r.NoopRounds)), r.Noop.Rate)
	if r.Peer != nil {
		row(fmt.Sprintf("bare engine on the peer's texts, calls of 256 texts (best of before/after the peer: %s)", rounds(r.PeerEngineRounds)), r.PeerEngine)
		for _, pr := range r.Peer.Runs {
			p("| transformers.js %s, batch %d, %d thread(s) (best of rounds: %s) | %d | %.2f | %.1f | n/a | n/a (another process) |\n",
				r.Peer.Version, pr.Batch, r.Peer.Threads, rounds(pr.Rounds), r.Peer.Texts, pr.Seconds, pr.TextsPerS)
		}
	}
	p("\nLatency: %d sequential requests of %q each; engine p50 %s (bare Embed), request p50 %s / p99 %s idle, %s / %s at 50%% load, where the bare p50 was %s (the background producer queued %d jobs, of which %d were done when the requests ended).\n",
		r.Idle.Requests, shortText, ms(r.Idle.Engine), ms(r.Idle.P50), ms(r.Idle.P99), ms(r.Loaded.P50), ms(r.Loaded.P99), ms(r.Loaded.Engine), r.Loaded.LoadJobs, r.Loaded.LoadDone)
	p("\nMemory: peak RSS %d MiB during the bulk run, %d MiB just before it (the process also holds the embedded nats-server and the producer); in-flight budget (the engine's, the one budget): %d tokens (admission %d). The no-op run peaked at %d MiB, the naive run at %d MiB.\n",
		r.Pipeline.PeakRSS>>20, r.Pipeline.BaseRSS>>20, r.InFlightTokens, r.EngineAdmissionTokens, r.Noop.PeakRSS>>20, r.Naive.PeakRSS>>20)
	if r.DenseFLOPs > 0 {
		p("\nArithmetic: a token costs %.3g MFLOP in the encoder's dense layers alone (attention scores, embeddings and heads not counted), so the bare engine sustained at least %.0f GFLOP/s per core on the corpus (padded tokens x that / seconds / %d cores)",
			r.DenseFLOPs/1e6, r.GFLOPsPerCore(r.Engine.Padded, r.Engine.Elapsed), r.Config.Sessions*r.Config.Threads)
		if r.Peer != nil {
			b := r.Peer.Best()
			p(" and %.0f on the peer's texts, where transformers.js at batch %d sustained %.0f (their real tokens; batch 1 pads nothing)",
				r.GFLOPsPerCore(r.PeerEngine.Padded, r.PeerEngine.Elapsed), b.Batch, r.GFLOPsPerCore(r.PeerEngine.Tokens, time.Duration(b.Seconds*float64(time.Second))))
		}
		p(". Read it against the cores' fp32 peak (an AVX-512 core with two FMA units: 64 FLOP per cycle, ~160 GFLOP/s at 2.5 GHz): both tools run the same graph on the same ONNX Runtime, and a ratio between them cannot exceed what is left of that peak.\n")
	}
	p("\nint8 against fp32, the bare engine on the same calls (alternating rounds, each keeping its best):\n\n")
	if r.Precision != nil {
		r.Precision.Markdown(w)
	} else {
		p("not measured: %v\n", r.PrecisionErr)
	}
	if dir := r.Config.Int8ModelDir; dir != "" {
		p("\nThe same on model `%s` (`--int8-model`; `make bench` gives it BGE-M3's layer width, `jetembed genmodel --size m3 --layers 2`: a layer's int8 share does not depend on how many there are):\n\n", filepath.Base(dir))
		if r.WidePrecision != nil {
			r.WidePrecision.Markdown(w)
		} else {
			p("not measured: %v\n", r.WidePrecisionErr)
		}
	}
	p("\n%s", method)
	return nil
}

// fairRows are the rows of issue 32: tenant B's jobs under tenant A's
// backlog in each mode, A's drain in each, and the weights' split.
func (r *Report) fairRows(p func(format string, args ...any)) {
	for _, f := range r.Fair {
		p("| Tenant B's job under tenant A's backlog of %d jobs, %s (engine in-flight budget %d tokens): p50 / p99 of %d jobs, A's results stored while each waited | %s / %s, %.0f | p99 <= %s (B's idle job p99 %s + 2 x max-chunk-latency %s) | %s |\n",
			f.Backlog, f.Mode, f.InFlight, len(f.Under), ms(f.P50()), ms(f.P99()), f.Ahead,
			ms(f.Bound()), ms(f.IdleP99()), ms(engine.DefaultMaxChunkLatency), verdict(f.Met()))
	}
	if len(r.Fair) > 0 {
		var modes, drains []string
		for _, f := range r.Fair {
			modes = append(modes, f.Mode)
			drains = append(drains, fmt.Sprintf("%.2f s (mean chunk %s)", f.Drain.Seconds(), ms(f.Chunk)))
		}
		f := r.Fair[0]
		p("| Tenant A's backlog of %d jobs (%d real tokens) drained, B's jobs among it: %s | %s | reported | |\n",
			f.Backlog, f.BacklogTokens, strings.Join(modes, " / "), strings.Join(drains, " / "))
	}
	if w := r.Weighted; w.Window > 0 {
		want := float64(weightA) / float64(weightB)
		p("| Weights A=%d, B=%d, both backlogged (%d jobs each; per-tenant consumers, in-flight budget %d): real tokens served to A / B in %d results (%d / %d) | %d / %d = %.2f | %.1f +-%.0f%% (%.2f to %.2f) | %s |\n",
			weightA, weightB, w.Jobs, w.InFlight, w.Window, w.Results[0], w.Results[1], w.Tokens[0], w.Tokens[1], w.Split(),
			want, 100*goalSplitTolerance, want*(1-goalSplitTolerance), want*(1+goalSplitTolerance), verdict(w.Met()))
	}
}

// method says how each figure is made, under the table it explains.
const method = `How each figure is made (package cmd/internal/bench):

- Corpus: synthetic English-word texts with a fixed seed, 25% of 3-12 words, 30% of 13-40, 35% of 41-160, 10% of 161-320; cut in order into jobs of which two in five hold one text and the others 2-32 texts.
- Bare engine: Engine.Embed on the whole corpus, one call per job, all at once (as the consumer makes them: it runs every job it holds, and the engine's one queue packs their texts), after an untimed warm pass; the engine is the one serve builds on CPU (sessions, scheduler, run-time model fitted from the runs, no warm-up grid and no probe, chunks padded to their own longest text, heads). Bare engine and pipeline runs alternate for a few rounds and each keeps its best, since other load on the machine slows whichever runs while it happens.
- Pipeline: a fresh embedded nats-server, the streams provisioned with the defaults, every job queued first, then a consumer like serve's (fetch loop, consumer, publisher, micro service) is started and timed until the last result is stored in EMBED_RESULTS.
- Re-index (result cache): a fresh nats-server with the defaults provisioned (the EMBED_CACHE bucket included), the bulk corpus queued and a worker with the cache on (serve --cache kv) timed as in the pipeline run (every text runs and is stored); then the same jobs queued under new job ids and a new worker timed the same way. The ratio is the second wall time over the first; the texts the model ran are counted on the Embed calls, and usage.cached is summed over the results. Queueing happens before each timed run (the 'with queueing' ratio counts it in). Then as many new texts, none in the corpus, of which 10% are copies of an earlier text of theirs at seeded positions, cut into jobs the same way: the texts the model ran against the distinct texts. A repeat in the job of its first is run once (the job deduplicates its texts); one in another job is a cache hit only when that job stored the text before it looked up, and the worker runs every job it holds at once.
- No-op loop: the same pipeline and engine (tokenizer, packer, scheduler, heads) on sessions that return zeros at once, over the corpus repeated to about 30,000 texts; its time per text, divided by the real engine's time per text, is the overhead. The no-op path is its texts/s over the bare no-op engine's (one Embed call per job, all at once); the two alternate for the rounds of the run (--rounds, 3) and each keeps its best, since the bare no-op engine about doubles its rate over its first rounds in a process.
- Naive baseline: the same pipeline with one job per Embed call and one session run per job, padded to the job's longest text, no packing across jobs (dense only).
- Gateway: a fresh nats-server and worker on the same engine, and jetembed's HTTP gateway (package gateway, as ` + "`jetembed gateway`" + ` runs it) in front of that service on a loopback port. The short text is asked alternately through the Go client (request-reply) and as POST /v1/embeddings through the gateway, sequentially, for the latencies; then 16 callers at once ask it for 2 s each way, twice, alternating, for the calls/s (each keeps its best). The ratio and the added latency are of the same run.
- Arrival-order batching: fixed batches of 32 texts in arrival order on bare sessions, each padded to its longest text, tokenizing inside the timing.
- Latency: sequential request-reply calls of one short text through the micro service, one every 200 ms (at most one minute), each preceded by a bare Embed of the same text; the added latency is the request percentile minus the bare p50. Under load a producer queues corpus jobs at half the measured pipeline rate meanwhile; under a backlog at twice that rate, so bulk work piles up in the stream and the engine; a request answered overloaded is counted as refused.
- Fairness (issue 32): an engine opened as serve opens it with --tenant-weight wa=3,wb=1, a fresh nats-server for each mode. Tenant A (embed.jobs.a.fair.<id>, replies in embed.results.a.>) and tenant B each run one job first (so that per-tenant consumers exist), then B five jobs alone: its idle job latency, publish to result stored as B's reader of the results stream sees it. A then publishes its backlog: one-text jobs cycling through the corpus's texts of at most 40 words (twice the corpus, 300 to 2,000 jobs), while the worker runs; B publishes one job of the short text as soon as the backlog is published, then one at a time spaced over what is left of it at the rate A's results came meanwhile, until A's backlog is done (at most 12 jobs). Goal: B's p99 within its idle p99 + 2 x the engine's chunk cap (--max-chunk-latency, 100 ms; the measured mean chunk, time in Run / runs, is reported beside the drain). Modes: one consumer of every job (provision's default), per-tenant consumers (provision --per-tenant) with serve's default in-flight budget, and per-tenant consumers with --in-flight-tokens 512 (as cmd/jetembed's fair-share end-to-end tests run serve): the budget holds jobs already admitted ahead of B's, which the engine runs in their order. The drain is from A's first publish to its last result stored.
- Weights: tenants wa (weight 3) and wb (weight 1) each queue half of A's backlog first, then a worker with those shares starts on per-tenant consumers (in-flight budget 512); the real tokens (the results' usage) of each tenant's results are summed in stream order from the first result after both tenants have one up to as many results as one tenant queued, so both still have jobs queued.
- Peer: @huggingface/transformers feature-extraction (CLS pooling, normalized) on onnxruntime-node's bundled CPU ONNX Runtime, the same model.onnx and tokenizer.json through symlinks, intra-op threads = sessions x threads, every batch size warmed once and then timed over the same texts in two rounds, keeping the best; jetembed's bare engine is timed on those texts right before and right after the peer, keeping the best.
- Peak RSS: /proc/self/status VmHWM, reset through /proc/self/clear_refs right before the bulk run. The process also holds the embedded nats-server, the producer and, during the bulk run, the stored jobs and results.
`

// noopCPU says what the two no-op runs cost in CPU a text and how many
// cores they kept busy, when both were measured.
func noopCPU(r *Report) string {
	n, b := r.Noop.Rate, r.NoopEngine
	if n.CPU <= 0 || b.CPU <= 0 {
		return ""
	}
	return fmt.Sprintf("; CPU a text %.1f / %.1f µs on %.2f / %.2f cores", n.CPUPerText(), b.CPUPerText(), n.Cores(), b.Cores())
}
