package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/model"
	"github.com/jetembed/jetembed/engine/ort"
	"github.com/jetembed/jetembed/fleet"
	"github.com/jetembed/jetembed/jetstream"
)

// fleetFlags are serve's flags for the fleet: shape propagation over the
// engines bucket, the compile lock, wanted shapes and shared probes.
type fleetFlags struct {
	mode     *string
	sm       *string
	idle     *time.Duration
	perHour  *int
	lockTTL  *time.Duration
	minSeq   *int
	pollBusy *time.Duration
}

func addFleetFlags(fs *flagSet) *fleetFlags {
	return &fleetFlags{
		mode:     fs.String("fleet", "auto", "share compiled shapes, wants and probe coefficients through the engines bucket: on, off, or auto (on for tensorrt, whose compiled engines are worth sharing; off for cpu and cuda)"),
		sm:       fs.String("fleet-sm", "", `GPU compute capability for shape keys, e.g. "8.9" (default: "cpu" on CPU, else asked of nvidia-smi)`),
		idle:     fs.Duration("fleet-idle", fleet.DefaultIdleQuiet, "how long this process must be idle before it compiles shapes the fleet wants"),
		perHour:  fs.Int("fleet-compiles-per-hour", fleet.DefaultCompilesPerHour, "most wanted shapes this process compiles in an hour"),
		lockTTL:  fs.Duration("fleet-lock-ttl", fleet.DefaultLockTTL, "TTL of a compile lock: a crashed holder frees it after this long (renewed while compiling)"),
		minSeq:   fs.Int("fleet-min-seq", -1, "shortest peer shape to pre-warm (-1: the guard seq on CPU, where only the guard needs shared shapes; every shape on GPUs)"),
		pollBusy: fs.Duration("fleet-poll", 2*time.Second, "how often the jobs backlog is read to tell idle from about to be busy"),
	}
}

// on reports whether this process joins the fleet: --fleet on or off, or
// auto: on for TensorRT only, the one provider whose shapes cost a compile
// (CPU and CUDA run any shape at once: there is nothing to share).
func (f *fleetFlags) on(ef *engineFlags) (bool, error) {
	switch *f.mode {
	case "on", "true":
		return true, nil
	case "off", "false":
		return false, nil
	case "auto", "":
		return ort.Kind(*ef.provider) == ort.TensorRT, nil
	}
	return false, fmt.Errorf("%w: --fleet %q: want auto, on or off", errUsage, *f.mode)
}

// openEngine opens the engine for serve. With the fleet on, it defers the
// engine's cost probe to take the coefficients a peer with the same model,
// SM and hardware stored (or to store its own). It returns the SM token
// the fleet's keys use.
func openEngine(ctx context.Context, log *slog.Logger, js natsjs.JetStream, ef *engineFlags, ff *fleetFlags, cfg jetstream.Config) (
	e *engine.Engine, sm string, err error) {
	on, err := ff.on(ef)
	if err != nil {
		return nil, "", err
	}
	if !on {
		e, _, err = ef.open(ctx)
		return e, "", err
	}
	if sm, err = ff.computeCapability(ctx, ef); err != nil {
		return nil, "", err
	}
	e, _, err = openSharingProbe(ctx, log, js, ef, cfg.Engines.Name, sm)
	if err != nil {
		return nil, "", err
	}
	return e, sm, nil
}

// openSharingProbe opens the engine with its cost probe deferred, then
// installs the coefficients a peer with the same model, SM and hardware
// stored in bucket, or probes and stores its own (when --probe asks for a
// probe at all).
func openSharingProbe(ctx context.Context, log *slog.Logger, js natsjs.JetStream, ef *engineFlags, bucket, sm string) (*engine.Engine, *model.Model, error) {
	cfg, _, err := ef.config()
	if err != nil {
		return nil, nil, err
	}
	flag := *ef.probe
	*ef.probe = "false" // probed below, unless a peer already did
	e, m, err := ef.open(ctx)
	*ef.probe = flag
	if err != nil {
		return nil, nil, err
	}
	if cfg.Probe {
		if err := shareProbe(ctx, log, js, e, bucket, sm, hardware(ctx, ef), memberName()); err != nil {
			e.Close()
			return nil, nil, err
		}
	}
	return e, m, nil
}

// joinFleet starts the shape propagation of e over js. The returned
// Embedder reports guard refusals as wants; stop leaves the fleet. With
// the fleet off it returns e itself. serve joins again on every new
// connection.
func joinFleet(ctx context.Context, log *slog.Logger, js natsjs.JetStream, e *engine.Engine, sm string, ef *engineFlags, ff *fleetFlags, cfg jetstream.Config) (
	emb engine.Embedder, stop func(), err error) {
	if on, err := ff.on(ef); err != nil || !on {
		return e, func() {}, err
	}
	kv, err := jetstream.OpenKVStore(ctx, js, cfg.Engines.Name)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (provision the bucket, or serve with --fleet=off)", err)
	}
	bgCtx, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var backlog atomic.Bool
	if jc, err := js.Consumer(ctx, cfg.Jobs.Name, cfg.Consumer.Name); err == nil {
		go pollBacklog(bgCtx, jc, *ff.pollBusy, &backlog)
	} else {
		log.Warn("fleet: the jobs consumer is not readable; idleness ignores the backlog", "err", err)
	}
	minSeq := *ff.minSeq
	if minSeq < 0 {
		minSeq = 0
		if sm == "cpu" {
			// A CPU run needs no warming: pre-warming short shapes would
			// only make every peer repeat every other's runs.
			minSeq = *ef.guardSeq
		}
	}
	fl, err := fleet.Join(ctx, kv, e, fleet.Config{
		Model: e.ModelID(), SM: sm, Member: memberName(),
		EngineCacheDir: *ef.engineCache, LockTTL: *ff.lockTTL, IdleQuiet: *ff.idle,
		CompilesPerHour: *ff.perHour, MinSeq: minSeq, Busy: backlog.Load, Logger: log,
	})
	if err != nil {
		stopBG()
		return nil, nil, fmt.Errorf("%w (provision the bucket, or serve with --fleet=off)", err)
	}
	return fleet.Wrap(e, fl), func() { _ = fl.Stop(context.Background()); stopBG() }, nil
}

// shareProbe installs the cost coefficients a peer stored for this model,
// SM and hardware, or probes and stores them.
func shareProbe(ctx context.Context, log *slog.Logger, js natsjs.JetStream, e *engine.Engine, bucket, sm, arch, member string) error {
	kv, err := jetstream.OpenKVStore(ctx, js, bucket)
	if err != nil {
		return err
	}
	rec, err := fleet.LoadProbe(ctx, kv, e.ModelID(), sm, arch)
	if err == nil {
		if err := e.UseCost(rec.A, rec.Bq); err == nil {
			log.Info("fleet: cost model from a peer's probe", "by", rec.By, "a", rec.A, "bq", rec.Bq, "arch", arch)
			return nil
		}
	} else if !errors.Is(err, fleet.ErrNoProbe) {
		log.Warn("fleet: reading shared probe coefficients", "err", err)
	}
	a, bq, err := e.Probe(ctx)
	if err != nil {
		return err
	}
	if a == 0 && bq == 0 {
		return nil // too few probe shapes fit: scheduling by tokens
	}
	if err := fleet.StoreProbe(ctx, kv, e.ModelID(), sm, arch, member, a, bq); err != nil {
		log.Warn("fleet: sharing probe coefficients", "err", err)
	}
	log.Info("fleet: probed the cost model", "a", a, "bq", bq, "arch", arch)
	return nil
}

// pollBacklog keeps busy set while the jobs consumer has undelivered jobs:
// a process with a backlog is about to work, not idle. Jobs waiting for a
// NAK delay are not pending, so the refused jobs themselves do not keep
// the fleet from compiling their shapes.
func pollBacklog(ctx context.Context, jc natsjs.Consumer, every time.Duration, busy *atomic.Bool) {
	t := time.NewTicker(max(every, 100*time.Millisecond))
	defer t.Stop()
	for {
		if info, err := jc.Info(ctx); err == nil {
			busy.Store(info.NumPending > 0)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// computeCapability is the SM of the shape keys: "cpu" for the CPU
// provider, --fleet-sm if set, else what nvidia-smi says of the first GPU.
func (f *fleetFlags) computeCapability(ctx context.Context, ef *engineFlags) (string, error) {
	if ort.Kind(*ef.provider) == ort.CPU || *ef.provider == "" {
		return "cpu", nil
	}
	if *f.sm != "" {
		return *f.sm, nil
	}
	cc, err := nvidiaSMI(ctx, "compute_cap", *ef.device)
	if err != nil {
		return "", fmt.Errorf("%w: --fleet-sm is needed: %w", errUsage, err)
	}
	return cc, nil
}

// hardware names what the cost coefficients depend on besides the model
// and SM: the provider, the CPU or GPU model, and the threads or precision.
func hardware(ctx context.Context, ef *engineFlags) string {
	kind := *ef.provider
	if ort.Kind(kind) == ort.CPU || kind == "" {
		return fmt.Sprintf("cpu-%s-%s-t%d", runtime.GOARCH, cpuModel(), *ef.threads)
	}
	gpu, err := nvidiaSMI(ctx, "name", *ef.device)
	if err != nil {
		gpu = "gpu"
	}
	prec := "fp32"
	if *ef.fp16 {
		prec = "fp16"
	}
	return kind + "-" + gpu + "-" + prec
}

func nvidiaSMI(ctx context.Context, field string, device int) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nvidia-smi", "--query-gpu="+field, "--format=csv,noheader", "--id="+strconv.Itoa(device)).Output()
	if err != nil {
		return "", fmt.Errorf("nvidia-smi --query-gpu=%s: %w", field, err)
	}
	v := strings.TrimSpace(string(out))
	if v == "" {
		return "", fmt.Errorf("nvidia-smi --query-gpu=%s: empty answer", field)
	}
	return v, nil
}

// cpuModel is the CPU's model name from /proc/cpuinfo, or "unknown".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return "unknown"
}

// memberName names this process in the bucket's records: host/pid.
func memberName() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "unknown"
	}
	return host + "/" + strconv.Itoa(os.Getpid())
}
