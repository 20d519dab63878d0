package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/jetstream/devserver"
	"github.com/jetembed/jetembed/node"
	"github.com/jetembed/jetembed/schema"
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
	listen := fs.String("listen", devserver.DefaultListen, "client address of the embedded NATS server (port 0: any free port)")
	dataDir := fs.String("data", "./jetembed-data", "directory of the JetStream file store; it survives restarts")
	verbose := fs.Bool("verbose", false, "print the NATS server's log")
	// No warm-up grid by default: up to 8192 tokens it takes a minute on
	// CPU, and a development server should answer at once.
	sc := addServeCommand(fs, false, false, "create")
	c, done, err := sc.parse(args, io)
	if done || err != nil {
		return err
	}
	if c.Objects.Replicas != 1 {
		return fmt.Errorf("%w: the dev server is a single node: --replicas must be 1", errUsage)
	}
	if c.Engine.Model == "" {
		if c.Engine.Model, err = bundledModel(); err != nil {
			return err
		}
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
	s, err := devserver.Start(devserver.Options{Listen: *listen, DataDir: dir, Logger: serverLog})
	if err != nil {
		return err
	}
	defer func() {
		s.Shutdown()
		s.WaitForShutdown()
	}()
	url := s.ClientURL()
	c.Runtime.NATS = jetstream.Options{URLs: []string{url}, Name: "jetembed-dev", Logger: log}
	err = provision(ctx, c.Runtime.NATS, c.Objects, io, jetstream.WithMode(provisionMode(c.Runtime.Check)), jetstream.ServerTuning())
	if errors.Is(err, jetstream.ErrMissing) {
		return fmt.Errorf("%w: %w (dev --provision=off: create them with `jetembed provision --nats %s`)", errConfig, err, url)
	}
	if err != nil && !errors.Is(err, jetstream.ErrDrift) {
		return err
	}
	api := ""
	if c.Runtime.API != nil {
		api = c.Runtime.API.Listen
	}
	printDevHelp(io, c.Objects, url, dir, api)
	fmt.Fprintf(io.out, "serving model %s; press Ctrl-C to stop\n", c.Engine.Model)
	c.Runtime.Check = node.SkipCheck // done above, with the same config
	err = serve(ctx, io, c)
	fmt.Fprintln(io.out, "stopping the dev server")
	return err
}

// devModel is the tiny test model the repository ships: random weights, the
// shapes of BGE-M3, enough to try the whole system without a download.
const devModel = "testdata/models/tiny-hidden"

// bundledModel finds [devModel] next to the executable (bin/jetembed in the
// repository) or under the working directory.
func bundledModel() (string, error) {
	var dirs []string
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			dirs = append(dirs, filepath.Dir(exe), filepath.Join(filepath.Dir(exe), ".."))
		}
	}
	if wd, err := os.Getwd(); err == nil {
		dirs = append(dirs, wd, filepath.Join(wd, ".."), filepath.Join(wd, "..", ".."))
	}
	for _, d := range dirs {
		p := filepath.Join(d, devModel)
		if _, err := os.Stat(filepath.Join(p, "model.onnx")); err == nil {
			return filepath.Clean(p), nil
		}
	}
	return "", fmt.Errorf("%w: no --model given and %s not found next to the executable or in the working directory", errUsage, devModel)
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

// printDevHelp tells the user where the dev server is and how to use it:
// the nats CLI, a job, a request, submit and the HTTP API (api, when on).
func printDevHelp(io stdio, cfg jetstream.Config, url, dir, api string) {
	fmt.Fprintf(io.out, "\nNATS JetStream dev server on %s, data in %s\n", url, dir)
	fmt.Fprintf(io.out, "connect with: --nats %s   (or JETEMBED_NATS=%s)\n", url, url)
	results := subjectRoot(cfg.Results.Subjects[0]) + ".demo"
	fmt.Fprintf(io.out, "the nats CLI:  export PATH=\"$PWD/.deps/bin:$PATH\"   (make deps installs it)\n")
	fmt.Fprintf(io.out, "read results: nats sub '%s.>' --server %s\n", results, url)
	fmt.Fprintf(io.out, "submit a job: nats pub -H Content-Type:application/json %s.demo '{\"v\":1,\"id\":\"1\",\"texts\":[\"hello\"],\"reply\":\"%s.1\"}' --server %s\n",
		subjectRoot(cfg.Jobs.Subjects[0]), results, url)
	fmt.Fprintf(io.out, "request:      nats req %s '{\"id\":\"1\",\"texts\":[\"hello\"]}' -H Content-Type:application/json --server %s\n", schema.SubjectEmbed, url)
	fmt.Fprintf(io.out, "or:           jetembed submit --nats %s --text hello\n", url)
	fmt.Fprintln(io.out, "max payload:  8 MiB here; a standard nats-server takes 1 MiB (jetembed submit reads it and cuts its jobs to fit)")
	if a := api; a != "" {
		fmt.Fprintf(io.out, "HTTP API:     curl http://%s/v1/embeddings -H Content-Type:application/json -d '{\"input\":\"hello\"}'\n", a)
	}
}
