package main

import (
	"context"
	"fmt"

	"github.com/jetembed/jetembed/cmd/internal/bench"
)

func init() {
	register(command{
		name:    "bench",
		summary: "run the benchmark suite (engine, NATS pipeline, baselines, peer) and print a Markdown table",
		run:     runBench,
	})
}

func runBench(ctx context.Context, args []string, io stdio) error {
	fs := newFlagSet("bench", io)
	modelDir := fs.String("model", ".deps/models/small-hidden", "hidden-state model directory (jetembed genmodel --size small --layout hidden)")
	ortLib := fs.String("ort-lib", "", "ONNX Runtime shared library (default: JETEMBED_ORT_LIB, then .deps, then the system loader)")
	sessions := fs.Int("sessions", 1, "engine sessions")
	threads := fs.Int("threads", 0, "intra-op threads per session (0: cores / sessions); the peer gets sessions x threads")
	texts := fs.Int("texts", 2000, "texts in the bulk corpus")
	seed := fs.Int("seed", 1, "seed of the corpus texts and job sizes")
	requests := fs.Int("requests", 200, "request-reply calls per latency figure")
	peerDir := fs.String("peer", "", "directory where scripts/peer is installed with npm (empty: no peer)")
	peerTexts := fs.Int("peer-texts", 200, "texts of the corpus the peer embeds at each batch size")
	peerBatches := fs.String("peer-batches", "1,8,32", "batch sizes of the peer, comma separated")
	int8Model := fs.String("int8-model", "", "a second hidden-state model directory the int8 rows also run on, at BGE-M3's layer width (jetembed genmodel --size m3 --layers 2); empty: none")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if *seed <= 0 {
		return fmt.Errorf("%w: --seed must be positive", errUsage)
	}
	batches, err := ints("peer-batches", *peerBatches)
	if err != nil {
		return err
	}
	r, err := bench.Run(ctx, bench.Config{
		ModelDir: *modelDir, ORTLib: *ortLib, Sessions: *sessions, Threads: *threads,
		Texts: *texts, Seed: uint64(*seed), Requests: *requests,
		PeerDir: *peerDir, PeerTexts: *peerTexts, PeerBatches: batches, Int8ModelDir: *int8Model, Log: io.err,
	})
	if err != nil {
		return err
	}
	return r.Markdown(io.out)
}
