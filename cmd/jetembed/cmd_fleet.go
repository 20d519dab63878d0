package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/jetembed/jetembed/fleet"
	"github.com/jetembed/jetembed/jetstream"
)

func init() {
	register(command{
		name:    "fleet",
		summary: "show the engines bucket: compiled shapes per model and SM, who built them, pending wants, locks, probes",
		run:     runFleet,
	})
}

func runFleet(ctx context.Context, args []string, io stdio) error {
	fs := newFlagSet("fleet", io)
	nf := addNATSFlags(fs)
	bucket := fs.String("engines-bucket", jetstream.DefaultConfig().Engines.Name, "name of the engine-shapes KV bucket")
	timeout := fs.Duration("timeout", 10*time.Second, "bound on connecting and reading the bucket")
	asJSON := fs.Bool("json", false, "print the bucket as one JSON object (shapes, wants, locks, probes) instead of tables")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	nc, err := jetstream.Connect(ctx, nf.options(slog.New(slog.NewTextHandler(io.err, nil))))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	kv, err := jetstream.OpenKVStore(ctx, js, *bucket)
	if err != nil {
		return err
	}
	tab, err := fleet.Read(ctx, kv)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(io.out)
		enc.SetIndent("", "  ")
		return enc.Encode(tab)
	}
	return tab.Write(io.out, time.Now())
}
