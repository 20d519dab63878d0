package bench

import (
	"context"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/ort"
)

// GoalInt8Engine is issue 33's goal for the bare engine in int8 over the
// same engine in float32, on the corpus.
const GoalInt8Engine = 1.8

// Precision is the bare engine in float32 and in int8 on the same calls,
// alternating rounds, each keeping its best.
type Precision struct {
	FP32, Int8             Rate
	FP32Rounds, Int8Rounds []float64
	// FP32CPU and Int8CPU are the process CPU time (user + system) of
	// each best round: on a machine other work keeps busy, the ratio of
	// CPU times is the steadier figure.
	FP32CPU, Int8CPU time.Duration
	// Plan is how the int8 sessions run (layers quantized, the canary's
	// fidelity), or why int8 was refused.
	Plan ort.PrecisionPlan
}

// Speedup is int8 texts/s over float32 texts/s.
func (p *Precision) Speedup() float64 { return ratio(p.Int8.PerSecond(), p.FP32.PerSecond()) }

// CPUSpeedup is float32 CPU time over int8 CPU time for the same texts.
func (p *Precision) CPUSpeedup() float64 {
	return ratio(p.FP32CPU.Seconds(), p.Int8CPU.Seconds())
}

// RunPrecision measures the bare engine in float32 and int8 on cfg's
// corpus alone (the precision part of [Run]).
func RunPrecision(ctx context.Context, cfg Config) (*Precision, error) {
	cfg = cfg.WithDefaults()
	s, err := openStack(cfg)
	if err != nil {
		return nil, err
	}
	u := &suite{cfg: cfg, s: s, r: &Report{Config: cfg, Started: time.Now()}}
	u.corpus = Corpus(cfg.Texts, cfg.Seed)
	u.jobs = Jobs(u.corpus, cfg.Seed)
	return u.precisionRuns(ctx)
}

// precisionRuns opens the engine in float32 and in int8 (its int8
// sessions after the canary) and alternates bare-engine rounds of the
// corpus, one call per job as the consumer makes them.
func (u *suite) precisionRuns(ctx context.Context) (*Precision, error) {
	s := u.s
	fp32, err := s.openEngineWith(ctx, ort.PrecisionFP32)
	if err != nil {
		return nil, err
	}
	defer fp32.Close()
	int8, plan, err := s.openInt8Engine(ctx)
	if err != nil {
		return nil, err
	}
	defer int8.Close()
	res := &Precision{Plan: plan}
	u.logf("int8: %s", plan)
	warm := fixedCalls(u.corpus[:min(len(u.corpus), engineCallTexts)], engineCallTexts)
	for _, e := range []*engine.Engine{fp32, int8} {
		if _, err := bareEngine(ctx, e, warm, 2); err != nil {
			return nil, fmt.Errorf("warm pass: %w", err)
		}
	}
	for round := range u.cfg.Rounds {
		for _, c := range []struct {
			e      *engine.Engine
			best   *Rate
			cpu    *time.Duration
			rounds *[]float64
			name   string
		}{{fp32, &res.FP32, &res.FP32CPU, &res.FP32Rounds, "fp32"}, {int8, &res.Int8, &res.Int8CPU, &res.Int8Rounds, "int8"}} {
			cpu0 := processCPU()
			r, err := bareEngine(ctx, c.e, u.jobs, len(u.jobs))
			if err != nil {
				return nil, fmt.Errorf("%s engine: %w", c.name, err)
			}
			cpu := processCPU() - cpu0
			*c.rounds = append(*c.rounds, r.PerSecond())
			if r.PerSecond() > c.best.PerSecond() {
				*c.best, *c.cpu = r, cpu
			}
			u.logf("round %d: %s engine %.1f texts/s, %.2f s CPU", round+1, c.name, r.PerSecond(), cpu.Seconds())
		}
	}
	return res, nil
}

// processCPU is this process's user + system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Markdown writes the precision figures: a goal row and the raw rates.
func (p *Precision) Markdown(w io.Writer) {
	f := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	f("| Measure | Result | Goal | |\n|---|---|---|---|\n")
	if !p.Plan.Int8 {
		f("| Bare engine int8 / fp32 | not measured: int8 refused (%s) | >= %.1fx | **missed** |\n\n", p.Plan.Note, GoalInt8Engine)
		return
	}
	f("| Bare engine int8 / fp32, texts/s (one run, wall time) | %.2fx | >= %.1fx | %s |\n", p.Speedup(), GoalInt8Engine, verdict(p.Speedup() >= GoalInt8Engine))
	f("| Bare engine int8 / fp32, CPU time of the same texts | %.2fx | reported | |\n", p.CPUSpeedup())
	f("| int8 canary against fp32 at load | %s | dense min >= %g, mean >= %g; sparse top-10 >= %g; colbert mean >= %g | %s |\n\n",
		p.Plan.Fidelity, ort.GateDenseMin, ort.GateDenseMean, ort.GateSparseMean, ort.GateColBERTMean, verdict(p.Plan.Fidelity.Check() == nil))
	f("| Contender | Texts | Seconds | CPU seconds | Texts/s (rounds) | Real/padded tokens |\n|---|---|---|---|---|---|\n")
	for _, c := range []struct {
		name   string
		r      Rate
		cpu    time.Duration
		rounds []float64
	}{{"bare engine fp32", p.FP32, p.FP32CPU, p.FP32Rounds}, {"bare engine int8", p.Int8, p.Int8CPU, p.Int8Rounds}} {
		f("| %s | %d | %.2f | %.2f | %.1f (%s) | %d / %d |\n", c.name, c.r.Texts, c.r.Elapsed.Seconds(), c.cpu.Seconds(), c.r.PerSecond(), rounds(c.rounds), c.r.Tokens, c.r.Padded)
	}
	f("\nint8: %s\n", p.Plan)
}
