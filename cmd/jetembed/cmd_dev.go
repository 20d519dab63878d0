package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/jetembed/jetembed/jetstream"
)

func init() {
	register(command{
		name:    "dev",
		summary: "run an embedded NATS JetStream server, provisioned, for local development",
		run:     runDev,
	})
}

func runDev(ctx context.Context, args []string, io stdio) error {
	fs := newFlagSet("dev", io)
	listen := fs.String("listen", jetstream.DefaultDevListen, "client address of the embedded NATS server (port 0: any free port)")
	dataDir := fs.String("data", "./jetembed-data", "directory of the JetStream file store; it survives restarts")
	verbose := fs.Bool("verbose", false, "print the NATS server's log")
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
	if cfg.Replicas != 1 {
		return fmt.Errorf("%w: the dev server is a single node: --replicas must be 1", errUsage)
	}
	dir, err := filepath.Abs(*dataDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	log := slog.New(slog.NewTextHandler(io.err, nil))
	var serverLog *slog.Logger
	if *verbose {
		serverLog = log
	}
	s, err := jetstream.StartDevServer(jetstream.DevOptions{Listen: *listen, DataDir: dir, Logger: serverLog})
	if err != nil {
		return err
	}
	defer func() {
		s.Shutdown()
		s.WaitForShutdown()
	}()
	url := s.ClientURL()
	if err := provision(ctx, jetstream.Options{URLs: []string{url}, Name: "jetembed-dev", Logger: log}, cfg, io); err != nil {
		return err
	}
	fmt.Fprintf(io.out, "\nNATS JetStream dev server on %s, data in %s\n", url, dir)
	fmt.Fprintf(io.out, "connect with: --nats %s   (or JETEMBED_NATS=%s)\n", url, url)
	fmt.Fprintf(io.out, "submit a job: nats pub -H Content-Type:application/json %s.demo '{\"v\":1,\"id\":\"1\",\"texts\":[\"hello\"]}' --server %s\n",
		subjectRoot(cfg.Jobs.Subjects[0]), url)
	return serveDev(ctx, url, io)
}

// serveDev runs the embedding service against the dev server at url until
// ctx ends (SIGINT or SIGTERM). The consumer loop does not exist yet, so for
// now it only keeps the server running; the serve command will be called
// from here with url as its --nats.
func serveDev(ctx context.Context, url string, io stdio) error {
	fmt.Fprintf(io.out, "no embedding consumer yet: this only runs the server at %s; press Ctrl-C to stop\n", url)
	<-ctx.Done()
	fmt.Fprintln(io.out, "stopping the dev server")
	return nil
}

// subjectRoot turns a wildcard subject like "embed.jobs.>" into the prefix
// a publisher extends: "embed.jobs".
func subjectRoot(subject string) string {
	for _, suffix := range []string{".>", ".*"} {
		if len(subject) > len(suffix) && subject[len(subject)-len(suffix):] == suffix {
			return subject[:len(subject)-len(suffix)]
		}
	}
	return subject
}
