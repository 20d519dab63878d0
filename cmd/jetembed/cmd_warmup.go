package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jetembed/jetembed/engine"
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
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	start := time.Now()
	e, m, err := ef.open(ctx)
	if err != nil {
		return err
	}
	defer e.Close()
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
	fmt.Fprintf(io.out, "model %s: %d sessions warmed in %v\n", m.ID, len(st.Sessions), time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(io.out, "ceiling %d tokens; %d shapes: %s\n", st.Ceiling, len(shapes), strings.Join(shapes, " "))
	if st.Cost != (engine.Config{}).Cost {
		fmt.Fprintf(io.out, "cost model: %.3g s/token + %.3g s/token/seq\n", st.Cost.A, st.Cost.Bq)
	}
	return nil
}
