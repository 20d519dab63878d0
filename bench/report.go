package bench

import (
	"fmt"
	"io"
	"time"
)

// Goals of issue 8, each checked in the table.
const (
	GoalEfficiency = 0.95 // pipeline / bare engine texts/s
	GoalOverhead   = 0.05 // loop time per text / engine time per text
	GoalNaive      = 3.0  // pipeline / naive texts/s
	GoalPeer       = 1.5  // jetembed engine / best peer texts/s
)

// Efficiency is pipeline texts/s over bare engine texts/s.
func (r *Report) Efficiency() float64 { return ratio(r.Pipeline.PerSecond(), r.Engine.PerSecond()) }

// Overhead is the time per text of the full loop around a no-op engine as a
// share of the real engine's time per text (engine texts/s over no-op
// pipeline texts/s).
func (r *Report) Overhead() float64 { return ratio(r.Engine.PerSecond(), r.Noop.PerSecond()) }

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
	p("| Loop overhead (no-op engine loop time per text / engine time per text) | %.1f%% | < %.0f%% | %s |\n",
		100*r.Overhead(), 100*GoalOverhead, verdict(r.Overhead() < GoalOverhead))
	p("| Pipeline / naive baseline (one session run per job) | %.2fx | >= %.0fx | %s |\n",
		r.OverNaive(), GoalNaive, verdict(r.OverNaive() >= GoalNaive))
	if r.Peer != nil {
		b := r.Peer.Best()
		p("| jetembed engine / transformers.js best (batch %d) | %.2fx | >= %.1fx | %s |\n",
			b.Batch, r.OverPeer(), GoalPeer, verdict(r.OverPeer() >= GoalPeer))
	} else if r.PeerErr != nil {
		p("| jetembed / transformers.js | not measured: %v | >= %.1fx | **missed** |\n", r.PeerErr, GoalPeer)
	}
	p("| Packing: real/padded tokens, packer vs arrival-order batches of %d | %.3f vs %.3f | | |\n",
		arrivalBatch, r.Engine.Fill(), r.Arrival.Fill())
	p("| Packing: bare engine texts/s / arrival-order texts/s | %.2fx | | |\n", ratio(r.Engine.PerSecond(), r.Arrival.PerSecond()))
	for _, l := range []struct {
		name string
		l    Latency
	}{{"idle", r.Idle}, {fmt.Sprintf("50%% load (%.0f texts/s)", r.Loaded.LoadTexts), r.Loaded}} {
		a50, a99 := l.l.Added()
		p("| Request-reply added latency, one short text, %s: p50 / p99 | %s / %s | | |\n", l.name, ms(a50), ms(a99))
	}
	p("| Peak RSS of the bulk run (VmHWM) / RSS before it | %d MiB / %d MiB | bounded by the in-flight budget | |\n\n",
		r.Pipeline.PeakRSS>>20, r.Pipeline.BaseRSS>>20)

	p("Raw measurements:\n\n| Contender | Texts | Seconds | Texts/s | Real/padded tokens |\n|---|---|---|---|---|\n")
	row := func(name string, x Rate) {
		fill := "n/a"
		if x.Padded > 0 {
			fill = fmt.Sprintf("%d / %d (%.3f)", x.Tokens, x.Padded, x.Fill())
		}
		p("| %s | %d | %.2f | %.1f | %s |\n", name, x.Texts, x.Elapsed.Seconds(), x.PerSecond(), fill)
	}
	row("bare engine (calls of 256 texts, 2 callers)", r.Engine)
	row("pipeline through NATS (queue pre-filled)", r.Pipeline.Rate)
	row("naive: one session run per job through NATS", r.Naive.Rate)
	row(fmt.Sprintf("arrival-order batches of %d on bare sessions", arrivalBatch), r.Arrival)
	row("no-op engine, bare", r.NoopEngine)
	row("no-op engine through NATS", r.Noop.Rate)
	if r.Peer != nil {
		row("bare engine on the peer's texts", r.PeerEngine)
		for _, pr := range r.Peer.Runs {
			p("| transformers.js %s, batch %d, %d thread(s) | %d | %.2f | %.1f | n/a |\n",
				r.Peer.Version, pr.Batch, r.Peer.Threads, r.Peer.Texts, pr.Seconds, pr.TextsPerS)
		}
	}
	p("\nLatency: %d sequential requests of %q each; engine p50 %s (bare Embed), request p50 %s / p99 %s idle, %s / %s at 50%% load (%d results of the background bulk stored meanwhile).\n",
		r.Idle.Requests, shortText, ms(r.Idle.Engine), ms(r.Idle.P50), ms(r.Idle.P99), ms(r.Loaded.P50), ms(r.Loaded.P99), r.Loaded.LoadDone)
	p("\nMemory: peak RSS %d MiB during the bulk run, %d MiB just before it (the process also holds the embedded nats-server and the producer); in-flight budgets: consumer %d estimated tokens, engine %d tokens. The no-op run peaked at %d MiB, the naive run at %d MiB.\n",
		r.Pipeline.PeakRSS>>20, r.Pipeline.BaseRSS>>20, r.InFlightTokens, r.EngineInflightTokens, r.Noop.PeakRSS>>20, r.Naive.PeakRSS>>20)
	return nil
}
