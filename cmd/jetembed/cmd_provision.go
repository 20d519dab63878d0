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
		summary: "create or update the streams, the consumer and the KV bucket (idempotent)",
		run:     runProvision,
	})
}

func runProvision(ctx context.Context, args []string, io stdio) error {
	fs := newFlagSet("provision", io)
	nf := addNATSFlags(fs)
	pf := addProvisionFlags(fs)
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
	return provision(ctx, nf.options(slog.New(slog.NewTextHandler(io.err, nil))), cfg, io)
}

// provision connects, runs [jetstream.Provision] and prints its report.
// Refused drift is an error, so the exit status tells a deploy pipeline to
// look.
func provision(ctx context.Context, o jetstream.Options, cfg jetstream.Config, io stdio) error {
	nc, err := jetstream.Connect(ctx, o)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	r, err := jetstream.Provision(ctx, js, cfg)
	fmt.Fprintf(io.out, "provisioned %s:\n%s", jetstream.RedactURL(nc.ConnectedUrl()), r)
	if err != nil {
		if errors.Is(err, jetstream.ErrDrift) {
			return fmt.Errorf("refused: %w", err)
		}
		return err
	}
	return nil
}
