package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
)

// Config is what the suite runs on and how big it is.
type Config struct {
	// ModelDir is a hidden-state model directory (`jetembed genmodel
	// --size small --layout hidden`).
	ModelDir string
	// ORTLib is the ONNX Runtime library; empty lets engine/ort find it.
	ORTLib string
	// Sessions and Threads are the engine's sessions and intra-op threads
	// per session; Threads 0 means NumCPU / Sessions. Every contender
	// (baselines, peer) gets the same total threads.
	Sessions, Threads int
	// Texts is the size of the bulk corpus; Seed fixes its texts and jobs.
	Texts int
	Seed  uint64
	// Requests is how many request-reply calls each latency figure has.
	Requests int
	// Rounds is how many alternating rounds of bare engine and pipeline
	// run; each keeps its best.
	Rounds int
	// PeerDir is where scripts/peer was installed (node_modules with
	// @huggingface/transformers); empty skips the peer. PeerTexts is how
	// many texts of the corpus it embeds at each of PeerBatches.
	PeerDir     string
	PeerTexts   int
	PeerBatches []int
	// Int8ModelDir, when set, is a second hidden-state model the int8
	// rows also run on: BGE-M3's layer width (`jetembed genmodel --size m3
	// --layers 2`), where int8's share of a layer is that of the model
	// jetembed serves; ModelDir's is MiniLM's.
	Int8ModelDir string
	// Log receives one line per step; nil means none.
	Log io.Writer
}

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	if c.Sessions <= 0 {
		c.Sessions = 1
	}
	if c.Threads <= 0 {
		c.Threads = max(runtime.NumCPU()/c.Sessions, 1)
	}
	if c.Texts <= 0 {
		c.Texts = 2000
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Rounds <= 0 {
		c.Rounds = 3
	}
	if c.Requests <= 0 {
		c.Requests = 200
	}
	if c.PeerTexts <= 0 {
		c.PeerTexts = 200
	}
	if len(c.PeerBatches) == 0 {
		c.PeerBatches = []int{1, 8, 32}
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c
}

// Report holds every measurement of one run.
type Report struct {
	Config  Config
	ModelID string
	Started time.Time
	Took    time.Duration
	// ServerProcess: the NATS runs had a nats-server process of their own
	// ($JETEMBED_BENCH_SERVER_PROCESS), whose CPU the runs' CPU leaves out.
	ServerProcess bool

	Jobs int
	// Engine is the bare engine on the corpus; Pipeline the same texts as
	// jobs through NATS; Noop the pipeline around zero-cost sessions;
	// NoopEngine the bare no-op engine; Naive one session run per job
	// through NATS; Arrival fixed arrival-order batches on bare sessions.
	Engine, NoopEngine, Arrival Rate
	// EngineCalls is how many Embed calls the bare engine makes of the
	// corpus: the batches the consumer would gather from the backlog.
	EngineCalls int
	// EngineRounds and PipelineRounds are the texts/s of every round;
	// NoopEngineRounds and NoopRounds those of the no-op runs.
	EngineRounds, PipelineRounds []float64
	NoopEngineRounds, NoopRounds []float64
	Pipeline, Noop, Naive        Bulk
	// Backlog is the latency while the producer queues at twice the
	// pipeline's rate, so a bulk backlog builds up.
	Idle, Loaded, Backlog Latency
	// Reindex is the result cache on the corpus: a first run, the same
	// texts under new job ids, and new texts with repeats.
	Reindex *Reindex
	// Busy is the sessions' busy fraction (time in Run / wall time /
	// sessions) during the best pipeline round.
	Busy float64
	// InFlightTokens and EngineAdmissionTokens are both the engine's bulk
	// in-flight budget (real tokens), the one budget since the job loop
	// holds none of its own.
	InFlightTokens, EngineAdmissionTokens int
	// PeerEngine is jetembed's bare engine on the peer's texts.
	Peer             *Peer
	PeerEngine       Rate
	PeerEngineRounds []float64
	PeerErr          error
	// Gateway is the HTTP gateway against bare request-reply.
	Gateway Gateway
	// Precision is the bare engine in float32 and int8 (nil with
	// PrecisionErr when it could not run).
	Precision    *Precision
	PrecisionErr error
	// WidePrecision is the same on Config.Int8ModelDir (nil without one,
	// or with WidePrecisionErr).
	WidePrecision    *Precision
	WidePrecisionErr error
	// Fair is tenant B's latency under tenant A's backlog in each mode
	// (one consumer, per-tenant consumers, per-tenant with a bounded
	// budget); Weighted the split of two backlogged tenants of weights
	// 3 and 1 (issue 32).
	Fair     []Fairness
	Weighted Weighted
	// DenseFLOPs is what one token costs in the encoder's dense layers
	// alone (2 x layers x (4h^2 + 2h x intermediate)): a floor on the
	// arithmetic of a run, to read a rate against the cores' peak.
	DenseFLOPs float64
}

// sessionBusy sums the sessions' time in Run.
func sessionBusy(e *engine.Engine) time.Duration {
	var d time.Duration
	for _, s := range e.Stats().Sessions {
		d += s.Busy
	}
	return d
}

// noopTexts is about how many texts the no-op runs embed.
const noopTexts = 30000

// suite is one run of the benchmarks: what every phase shares.
type suite struct {
	cfg    Config
	s      *stack
	corpus []string
	jobs   [][]string
	cc     consumer.Config // the consumer as serve configures it
	r      *Report
}

func (u *suite) logf(format string, args ...any) {
	fmt.Fprintf(u.cfg.Log, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// Run runs the suite: the bare engine against the pipeline, the re-index
// with the result cache, request-reply latency, per-tenant fairness, the
// transformers.js peer, the baselines and the no-op loop.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.WithDefaults()
	s, err := openStack(cfg)
	if err != nil {
		return nil, err
	}
	u := &suite{cfg: cfg, s: s, r: &Report{Config: cfg, Started: time.Now(), ServerProcess: os.Getenv(serverProcessEnv) != ""}}
	u.corpus = Corpus(cfg.Texts, cfg.Seed)
	u.jobs = Jobs(u.corpus, cfg.Seed)
	u.r.Jobs = len(u.jobs)
	// The budgets are the engine's, as serve sizes them
	// (engine.DefaultBudgets): 4 and 2 runs of 16384 tokens on every
	// session.
	u.cc = consumer.Config{}
	u.logf("corpus: %d texts in %d jobs; model %s; %d session(s) x %d thread(s)", len(u.corpus), len(u.jobs), s.m.ID, cfg.Sessions, cfg.Threads)

	cost, err := u.engineRuns(ctx)
	if err != nil {
		return nil, err
	}
	if err := u.fairRuns(ctx); err != nil {
		return nil, err
	}
	if u.r.Precision, err = u.precisionRuns(ctx); err != nil {
		u.r.PrecisionErr = err
		u.logf("int8: %v", err)
	}
	if dir := u.cfg.Int8ModelDir; dir != "" {
		c := u.cfg
		c.ModelDir = dir
		if u.r.WidePrecision, err = RunPrecision(ctx, c); err != nil {
			u.r.WidePrecisionErr = err
			u.logf("int8 on %s: %v", dir, err)
		}
	}
	if err := u.baselines(ctx); err != nil {
		return nil, err
	}
	if err := u.noopRuns(ctx, cost); err != nil {
		return nil, err
	}
	u.r.Took = time.Since(u.r.Started)
	return u.r, nil
}

// engineRuns runs every figure made on the real engine: bare engine and
// pipeline rounds, request-reply latency and the peer. It returns the
// engine's fitted cost model, for the no-op engine to pack the same chunks.
func (u *suite) engineRuns(ctx context.Context) (engine.Cost, error) {
	r, s := u.r, u.s
	e, err := s.openEngine(ctx)
	if err != nil {
		return engine.Cost{}, err
	}
	defer e.Close()
	r.ModelID = e.ModelID()
	mc := s.m.Config
	r.DenseFLOPs = denseFLOPs(mc.Layers, mc.HiddenSize, mc.Intermediate)
	st := e.Stats()
	r.EngineAdmissionTokens = st.AdmissionBudget
	r.InFlightTokens = st.AdmissionBudget
	u.logf("engine ready (cost model a=%.3g bq=%.3g)", st.Cost.A, st.Cost.Bq)
	if _, err := bareEngine(ctx, e, fixedCalls(u.corpus[:min(len(u.corpus), engineCallTexts)], engineCallTexts), 2); err != nil {
		return engine.Cost{}, fmt.Errorf("warm pass: %w", err)
	}
	if err := u.rounds(ctx, e); err != nil {
		return engine.Cost{}, err
	}
	if err := u.reindex(ctx, e); err != nil {
		return engine.Cost{}, err
	}
	if err := u.latencies(ctx, e); err != nil {
		return engine.Cost{}, err
	}
	if u.cfg.PeerDir != "" {
		if err := u.peerRuns(ctx, e); err != nil {
			return engine.Cost{}, err
		}
	}
	return st.Cost, nil
}

// rounds alternates the bare engine and the pipeline for Rounds rounds;
// each keeps its best: other work on the machine slows whichever runs
// while it happens, and the best of alternating rounds is the least
// disturbed figure of each. The consumer makes one Embed call per job,
// all the jobs it holds at once; the bare engine gets the same calls.
func (u *suite) rounds(ctx context.Context, e *engine.Engine) error {
	r := u.r
	r.EngineCalls = len(u.jobs)
	a, err := u.alternate(ctx, e, u.jobs, "bare engine", "pipeline")
	if err != nil {
		return err
	}
	r.Engine, r.EngineRounds, r.Pipeline, r.PipelineRounds, r.Busy = a.bare, a.bareRounds, a.pipe, a.pipeRounds, a.busy
	return nil
}

// alternation is what [suite.alternate] measured: the best bare and
// pipeline rounds, every round's texts/s, and the sessions' busy fraction
// during the best pipeline round.
type alternation struct {
	bare                   Rate
	pipe                   Bulk
	bareRounds, pipeRounds []float64
	busy                   float64
}

// alternate runs jobs through e bare (one call per job, all at once) and
// then through the pipeline, for the config's rounds, keeping the best of
// each: other work on the machine slows whichever runs while it happens.
func (u *suite) alternate(ctx context.Context, e *engine.Engine, jobs [][]string, bareName, pipeName string) (alternation, error) {
	var a alternation
	for round := range u.cfg.Rounds {
		bare, err := bareEngine(ctx, e, jobs, len(jobs))
		if err != nil {
			return a, fmt.Errorf("%s: %w", bareName, err)
		}
		a.bareRounds = append(a.bareRounds, bare.PerSecond())
		if bare.PerSecond() > a.bare.PerSecond() {
			a.bare = bare
		}
		cw := &counting{Embedder: e}
		busy0 := sessionBusy(e)
		pipe, err := bulkRun(ctx, cw, u.cc, jobs)
		if err != nil {
			return a, fmt.Errorf("%s: %w", pipeName, err)
		}
		pipe.Tokens, pipe.Padded = cw.totals()
		a.pipeRounds = append(a.pipeRounds, pipe.PerSecond())
		if pipe.PerSecond() > a.pipe.PerSecond() {
			a.pipe = pipe
			a.busy = float64(sessionBusy(e)-busy0) / float64(pipe.Elapsed) / float64(u.cfg.Sessions)
		}
		u.logf("round %d: %s %.1f texts/s, %s %.1f texts/s, peak RSS %d MiB", round+1, bareName, bare.PerSecond(), pipeName, pipe.PerSecond(), pipe.PeakRSS>>20)
	}
	return a, nil
}

// reindex runs the re-index measurement on the engine and the bulk jobs.
func (u *suite) reindex(ctx context.Context, e *engine.Engine) error {
	x, err := reindexRuns(ctx, e, u.cc, u.jobs, u.cfg.Seed)
	if err != nil {
		return fmt.Errorf("re-index: %w", err)
	}
	u.r.Reindex = x
	u.logf("re-index: first %.2f s, same texts under new ids %.2f s (ratio %.3f, %d texts run, %d cached); %d new texts with %d repeats: %d run of %d distinct, at most %d runs of one",
		x.First.Elapsed.Seconds(), x.Again.Elapsed.Seconds(), x.Ratio(), x.Again.Ran, x.Again.Cached,
		x.Repeats.Texts, x.Repeated, x.Repeats.Ran, x.Repeats.Distinct, x.Repeats.MaxRuns)
	return nil
}

// latencies measures request-reply idle, at half the pipeline's rate and
// under a backlog (twice its rate).
func (u *suite) latencies(ctx context.Context, e *engine.Engine) error {
	r, n := u.r, u.cfg.Requests
	var err error
	if r.Idle, err = requestLatency(ctx, e, u.cc, n, 0, nil); err != nil {
		return fmt.Errorf("idle latency: %w", err)
	}
	u.logf("request-reply idle: p50 %v p99 %v (engine %v)", r.Idle.P50, r.Idle.P99, r.Idle.Engine)
	if r.Loaded, err = requestLatency(ctx, e, u.cc, n, r.Pipeline.PerSecond()/2, u.jobs); err != nil {
		return fmt.Errorf("latency at 50%% load: %w", err)
	}
	u.logf("request-reply at 50%% load: p50 %v p99 %v", r.Loaded.P50, r.Loaded.P99)
	if r.Backlog, err = requestLatency(ctx, e, u.cc, n, 2*r.Pipeline.PerSecond(), u.jobs); err != nil {
		return fmt.Errorf("latency under a backlog: %w", err)
	}
	u.logf("request-reply under a backlog: p50 %v p99 %v, %d refused", r.Backlog.P50, r.Backlog.P99, r.Backlog.Refused)
	if r.Gateway, err = gatewayBench(ctx, e, u.cc, n); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	g := r.Gateway
	u.logf("gateway: p50 %v p99 %v (bare %v / %v); %.0f calls/s with %d callers (bare %.0f): ratio %.2f",
		g.HTTPP50, g.HTTPP99, g.BareP50, g.BareP99, g.HTTPRate, g.Callers, g.BareRate, g.Ratio())
	return nil
}

// peerRuns times the transformers.js peer; jetembed's engine runs on the
// peer's texts right before and right after it and keeps its best, as the
// peer keeps the best of its rounds: both see the same machine.
func (u *suite) peerRuns(ctx context.Context, e *engine.Engine) error {
	r := u.r
	peerTexts := u.corpus[:min(u.cfg.PeerTexts, len(u.corpus))]
	before, err := bareEngine(ctx, e, fixedCalls(peerTexts, engineCallTexts), 2)
	if err != nil {
		return fmt.Errorf("engine on the peer texts: %w", err)
	}
	r.Peer, r.PeerErr = peer(ctx, u.cfg, u.s, peerTexts)
	after, err := bareEngine(ctx, e, fixedCalls(peerTexts, engineCallTexts), 2)
	if err != nil {
		return fmt.Errorf("engine on the peer texts: %w", err)
	}
	r.PeerEngineRounds = []float64{before.PerSecond(), after.PerSecond()}
	r.PeerEngine = before
	if after.PerSecond() > before.PerSecond() {
		r.PeerEngine = after
	}
	if r.PeerErr != nil {
		u.logf("peer failed: %v", r.PeerErr)
	} else {
		u.logf("peer: best %.1f texts/s at batch %d; jetembed engine %.1f texts/s on the same texts",
			r.Peer.Best().TextsPerS, r.Peer.Best().Batch, r.PeerEngine.PerSecond())
	}
	return nil
}

// baselines runs arrival-order batching and the naive one-run-per-job
// pipeline on plain sessions.
func (u *suite) baselines(ctx context.Context) error {
	r := u.r
	pool, err := u.s.openRunners()
	if err != nil {
		return err
	}
	defer pool.Close()
	if r.Arrival, err = arrivalOrder(ctx, u.s, pool, u.corpus); err != nil {
		return fmt.Errorf("arrival-order batching: %w", err)
	}
	u.logf("arrival-order batches of %d: %.1f texts/s", arrivalBatch, r.Arrival.PerSecond())
	naive := &naiveEmbedder{s: u.s, pool: pool}
	ncc := consumer.Config{} // the runner pool bounds the runs at once
	if r.Naive, err = bulkRun(ctx, naive, ncc, u.jobs); err != nil {
		return fmt.Errorf("naive baseline: %w", err)
	}
	r.Naive.Tokens, r.Naive.Padded = naive.tokens, naive.padded
	u.logf("naive baseline: %.1f texts/s", r.Naive.PerSecond())
	return nil
}

// noopRuns times the same engine and pipeline around sessions that return
// at once. They are three orders of magnitude faster, so they go over the
// corpus many times to last long enough to time.
func (u *suite) noopRuns(ctx context.Context, cost engine.Cost) error {
	r := u.r
	noop, err := u.s.openNoop(ctx, cost)
	if err != nil {
		return err
	}
	defer noop.Close()
	reps := max(1, noopTexts/len(u.corpus))
	var noopJobs [][]string
	for range reps {
		noopJobs = append(noopJobs, u.jobs...)
	}
	// Alternating rounds, best of each, as the engine and the pipeline:
	// the bare no-op engine speeds up about twofold over its first rounds
	// in a process (its pools and the runtime's heap and stacks grow), so
	// one cold round of it flatters the ratio.
	a, err := u.alternate(ctx, noop, noopJobs, "no-op engine", "no-op pipeline")
	if err != nil {
		return err
	}
	r.NoopEngine, r.NoopEngineRounds, r.Noop, r.NoopRounds = a.bare, a.bareRounds, a.pipe, a.pipeRounds
	return nil
}

// peer runs the transformers.js peer on texts with the model's files.
func peer(ctx context.Context, cfg Config, s *stack, texts []string) (*Peer, error) {
	if _, err := os.Stat(cfg.PeerDir); err != nil {
		return nil, fmt.Errorf("peer directory: %w", err)
	}
	dir, err := os.MkdirTemp("", "jetembed-peer-model-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	hf := dir + "/model"
	if err := hfLayout(hf, s.m.Dir, s.m.ONNXPath, s.m.TokenizerPath); err != nil {
		return nil, err
	}
	p, err := runPeer(ctx, cfg.PeerDir, hf, texts, cfg.Sessions*cfg.Threads, cfg.PeerBatches)
	if err != nil {
		return nil, err
	}
	if len(p.Runs) == 0 {
		return nil, errors.New("peer reported no runs")
	}
	return &p, nil
}
