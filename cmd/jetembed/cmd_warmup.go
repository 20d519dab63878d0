package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/node"
)

func init() {
	register(command{
		name:    "warmup",
		summary: "run the warm-up grid (compiling TensorRT engines into the cache) and exit: init-container mode",
		run:     runWarmup,
	})
}

func runWarmup(ctx context.Context, args []string, io stdio) error {
	fs := newFlagSet("warmup", io)
	ef := addEngineFlags(fs, true)
	canary := fs.Bool("canary", true, "after warm-up, embed a canary text through the whole path")
	nf := addNATSFlagsWith(fs, "", "NATS server URLs, comma separated: when set, every warmed shape and the probe coefficients are recorded in the engines bucket, as serve records them, so peers pre-warm from the shared engine cache")
	bucket := fs.String("engines-bucket", jetstream.DefaultConfig().Engines.Name, "name of the engine-shapes KV bucket")
	sm := fs.String("fleet-sm", "", `GPU compute capability for shape keys, e.g. "8.9" (default: "cpu" on CPU, else asked of nvidia-smi)`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	ec, err := ef.config()
	if err != nil {
		return err
	}
	start := time.Now()
	var rec *node.Recorder
	if *nf.urls != "" {
		// Recorded as serve records it: the cost probe is a peer's, or
		// this one's shared.
		ff := fleetFlags{sm: *sm}
		smToken, err := ff.computeCapability(ec.Provider)
		if err != nil {
			return err
		}
		arch := ""
		if ec.Engine.Probe {
			arch = ec.Provider.Hardware(ctx)
		}
		if rec, err = node.DialRecorder(ctx, nf.options(slog.New(slog.NewTextHandler(io.err, nil))), *bucket, smToken, arch); err != nil {
			return err
		}
		defer rec.Close()
	}
	probe := ec.Engine.Probe
	if rec != nil {
		ec.Engine.Probe = false // probed below, unless a peer already did
	}
	o, err := ec.open(ctx, io.err)
	if err != nil {
		return err
	}
	e := o.engine
	defer e.Close()
	if rec != nil && probe {
		if err := rec.ShareProbe(ctx, e); err != nil {
			return err
		}
	}
	if *canary {
		if err := e.Canary(ctx); err != nil {
			return fmt.Errorf("canary: %w", err)
		}
	}
	st := e.Stats()
	shapes := make([]string, len(st.Warmed))
	for i, s := range st.Warmed {
		shapes[i] = s.String()
	}
	fmt.Fprintf(io.out, "model %s: %d sessions warmed in %v\n", o.model.ID, len(st.Sessions), time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(io.out, "ceiling %d tokens; %d shapes: %s\n", st.Ceiling, len(shapes), strings.Join(shapes, " "))
	if st.Cost != (engine.Config{}).Cost {
		fmt.Fprintf(io.out, "cost model: %.3g s/token + %.3g s/token/seq\n", st.Cost.A, st.Cost.Bq)
	}
	if rec != nil {
		n, err := rec.Publish(ctx, e)
		if err != nil {
			return err
		}
		fmt.Fprintf(io.out, "engines bucket %s: %d new shape records (%d shapes warmed)\n", rec.Bucket(), n, len(shapes))
	}
	return nil
}
