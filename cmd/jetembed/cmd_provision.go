package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jetembed/jetembed/jetstream"
)

func init() {
	register(command{
		name:    "provision",
		summary: "create or update the streams, the consumer and the KV bucket: the one owner of server-side configuration",
		run:     runProvision,
	})
}

func runProvision(ctx context.Context, args []string, io stdio) error {
	fs := newFlagSet("provision", io)
	nf := addNATSFlags(fs)
	pf := addProvisionFlags(fs, true)
	dryRun := fs.Bool("dry-run", false, "print what provision would create or change, and change nothing")
	downgrade := fs.Bool("allow-downgrade", false, "let provision lower replicas and remove subjects (refused otherwise)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	cfg, err := pf.config()
	if err != nil {
		return err
	}
	var opts []jetstream.ProvisionOption
	if *dryRun {
		opts = append(opts, jetstream.DryRun())
	}
	if *downgrade {
		opts = append(opts, jetstream.AllowDowngrade())
	}
	return provision(ctx, nf.options(slog.New(slog.NewTextHandler(io.err, nil))), cfg, io, opts...)
}

// provision connects, runs [jetstream.Provision] and prints its report.
// Refused drift is an error, so the exit status tells a deploy pipeline to
// look.
func provision(ctx context.Context, o jetstream.Options, cfg jetstream.Config, io stdio, opts ...jetstream.ProvisionOption) error {
	nc, err := jetstream.Connect(ctx, o)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	r, err := jetstream.Provision(ctx, js, cfg, opts...)
	verb := "provisioned"
	if r.DryRun {
		verb = "dry run (nothing changed) on"
	}
	fmt.Fprintf(io.out, "%s %s:\n%s", verb, jetstream.RedactURL(nc.ConnectedUrl()), r)
	if err != nil {
		if errors.Is(err, jetstream.ErrDrift) || errors.Is(err, jetstream.ErrDowngrade) {
			return fmt.Errorf("refused: %w", err)
		}
		return err
	}
	return nil
}
