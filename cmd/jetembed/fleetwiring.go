package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jetembed/jetembed/engine/ort"
	"github.com/jetembed/jetembed/fleet"
	"github.com/jetembed/jetembed/node"
)

// fleetFlags are serve's flags for the fleet: shape propagation over the
// engines bucket, the compile lock, wanted shapes and shared probes, and
// how often the jobs consumer is sampled.
type fleetFlags struct {
	mode    string
	sm      string
	idle    time.Duration
	perHour int
	lockTTL time.Duration
	minSeq  int
	poll    time.Duration
}

func addFleetFlags(fs *flagSet) *fleetFlags {
	f := new(fleetFlags)
	fs.StringVar(&f.mode, "fleet", "auto", "share compiled shapes, wants and probe coefficients through the engines bucket: on, off, or auto (on for tensorrt, whose compiled engines are worth sharing; off for cpu and cuda)")
	fs.StringVar(&f.sm, "fleet-sm", "", `GPU compute capability for shape keys, e.g. "8.9" (default: "cpu" on CPU, else asked of nvidia-smi)`)
	fs.DurationVar(&f.idle, "fleet-idle", fleet.DefaultIdleQuiet, "how long this process must be idle before it compiles shapes the fleet wants")
	fs.IntVar(&f.perHour, "fleet-compiles-per-hour", fleet.DefaultCompilesPerHour, "most wanted shapes this process compiles in an hour")
	fs.DurationVar(&f.lockTTL, "fleet-lock-ttl", fleet.DefaultLockTTL, "TTL of a compile lock: a crashed holder frees it after this long (renewed while compiling)")
	fs.IntVar(&f.minSeq, "fleet-min-seq", -1, "shortest peer shape to pre-warm (-1: the guard seq on CPU, where only the guard needs shared shapes; every shape on GPUs)")
	fs.DurationVar(&f.poll, "fleet-poll", node.DefaultRefresh, "how often the jobs consumer's info is read: its backlog tells idle from about to be busy (fleet) and feeds the backlog gauges and the heartbeat; changed server settings reopen the fetch loop")
	return f
}

// on reports whether this process joins the fleet: --fleet on or off, or
// auto: on for TensorRT only, the one provider whose shapes cost a compile
// (CPU and CUDA run any shape at once: there is nothing to share).
func (f *fleetFlags) on(p ort.Provider) (bool, error) {
	switch f.mode {
	case "on", "true":
		return true, nil
	case "off", "false":
		return false, nil
	case "auto", "":
		return p.Kind == ort.TensorRT, nil
	}
	return false, fmt.Errorf("%w: --fleet %q: want auto, on or off", errUsage, f.mode)
}

// config is the fleet membership of an engine of ec. With the fleet on,
// the engine's cost probe is deferred to the node, which takes the
// coefficients a peer with the same model, SM and hardware stored, or
// probes and stores its own.
func (f *fleetFlags) config(ec engineConfig) (node.FleetConfig, error) {
	on, err := f.on(ec.Provider)
	if err != nil || !on {
		return node.FleetConfig{}, err
	}
	sm, err := f.computeCapability(ec.Provider)
	if err != nil {
		return node.FleetConfig{}, err
	}
	minSeq := f.minSeq
	if minSeq < 0 {
		minSeq = 0
		if sm == "cpu" {
			// A CPU run needs no warming: pre-warming short shapes would
			// only make every peer repeat every other's runs.
			minSeq = ec.Engine.GuardSeq
		}
	}
	fc := node.FleetConfig{On: true, ShareProbe: ec.Engine.Probe, Member: fleet.Config{
		SM: sm, EngineCacheDir: ec.Provider.EngineCacheDir, LockTTL: f.lockTTL, IdleQuiet: f.idle,
		CompilesPerHour: f.perHour, MinSeq: minSeq,
	}}
	if fc.ShareProbe {
		fc.Hardware = ec.Provider.Hardware(context.Background())
	}
	return fc, nil
}

// computeCapability is the SM of the shape keys: "cpu" for the CPU
// provider, --fleet-sm if set, else what nvidia-smi says of the first GPU.
func (f *fleetFlags) computeCapability(p ort.Provider) (string, error) {
	if f.sm != "" && !p.CPUProvider() {
		return f.sm, nil
	}
	cc, err := p.ComputeCapability(context.Background())
	if err != nil {
		return "", fmt.Errorf("%w: --fleet-sm is needed: %w", errUsage, err)
	}
	return cc, nil
}
