package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/model"
	"github.com/jetembed/jetembed/fleet"
	"github.com/jetembed/jetembed/jetstream"
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
	start := time.Now()
	var pub *warmupPublisher
	if *nf.urls != "" {
		var err error
		if pub, err = dialWarmupPublisher(ctx, io, nf, ef, *bucket, *sm); err != nil {
			return err
		}
		defer pub.close()
	}
	e, m, err := pub.open(ctx, ef)
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
	if pub != nil {
		n, err := pub.publish(ctx, e)
		if err != nil {
			return err
		}
		fmt.Fprintf(io.out, "engines bucket %s: %d new shape records (%d shapes warmed)\n", *bucket, n, len(shapes))
	}
	return nil
}

// warmupPublisher records what `jetembed warmup --nats` warmed in the
// engines bucket: the init container's work, shared with the fleet.
type warmupPublisher struct {
	log *slog.Logger
	nc  *nats.Conn
	js  natsjs.JetStream
	kv  *jetstream.KVStore
	sm  string
}

func dialWarmupPublisher(ctx context.Context, io stdio, nf *natsFlags, ef *engineFlags, bucket, sm string) (*warmupPublisher, error) {
	log := slog.New(slog.NewTextHandler(io.err, nil))
	ff := &fleetFlags{sm: &sm}
	sm, err := ff.computeCapability(ctx, ef)
	if err != nil {
		return nil, err
	}
	nc, err := jetstream.Connect(ctx, nf.options(log))
	if err != nil {
		return nil, err
	}
	p := &warmupPublisher{log: log, nc: nc, sm: sm}
	if p.js, err = jetstream.New(nc); err == nil {
		p.kv, err = jetstream.OpenKVStore(ctx, p.js, bucket)
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("%w (provision the bucket first)", err)
	}
	return p, nil
}

// open opens the engine; with a publisher, the cost probe is a peer's or
// is shared, as serve does.
func (p *warmupPublisher) open(ctx context.Context, ef *engineFlags) (*engine.Engine, *model.Model, error) {
	if p == nil {
		return ef.open(ctx)
	}
	return openSharingProbe(ctx, p.log, p.js, ef, p.kv.Bucket(), p.sm)
}

func (p *warmupPublisher) publish(ctx context.Context, e *engine.Engine) (int, error) {
	return fleet.Publish(ctx, p.kv, e, fleet.Config{Model: e.ModelID(), SM: p.sm, Member: memberName(), Logger: p.log})
}

func (p *warmupPublisher) close() { p.nc.Close() }
