package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/internal/mallocenv"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// command is one subcommand of jetembed.
type command struct {
	name    string
	summary string
	// args is what follows the command name in its usage line (default
	// "[flags]").
	args string
	// run parses args (without the subcommand name) and does the work.
	run func(ctx context.Context, args []string, stdio stdio) error
}

// stdio are the streams a command talks to; tests replace them.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

var commands = map[string]command{}

func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("jetembed: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

// errUsage marks an error caused by the command line; main exits 2 for it.
var errUsage = errors.New("usage")

// exitFatal is the exit status after a fatal TensorRT engine-build error
// (engine.ErrFatal): the GPU state of this process is unrecoverable and the
// orchestrator must replace it. 70 is EX_SOFTWARE.
const exitFatal = 70

// errConfig marks a configuration the server does not have (a missing
// stream or consumer); main exits 78 (EX_CONFIG) for it.
var errConfig = errors.New("config")

// engineCommands run ONNX Runtime in this process: on the CPU provider
// they get glibc's allocator tuned for it (mallocenv.Reexec).
var engineCommands = map[string]bool{"serve": true, "dev": true, "embed": true, "bench": true, "warmup": true}

func main() {
	if len(os.Args) > 1 && engineCommands[os.Args[1]] && cpuProvider(os.Args[2:]) {
		mallocenv.Reexec()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(runMain(ctx, os.Args[1:], stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr}))
}

func runMain(ctx context.Context, args []string, io stdio) int {
	switch {
	case len(args) > 0 && (args[0] == "--version" || args[0] == "-version"):
		args = []string{"version"}
	case len(args) > 1 && args[0] == "help":
		// jetembed help CMD is jetembed CMD -h.
		args = []string{args[1], "-h"}
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(io.err)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(io.err, "jetembed: unknown command %q\n\n", args[0])
		usage(io.err)
		return 2
	}
	if err := c.run(ctx, args[1:], io); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		var le *listenError
		switch {
		case errors.Is(err, errUsage):
			// The error first, then one usage line and where to look, as
			// cobra and clap do: never the whole flag list, which would
			// scroll the error away.
			fmt.Fprintf(io.err, "jetembed %s: %s\n", c.name, strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
			fmt.Fprintf(io.err, "Usage: %s\nRun 'jetembed %s --help' for its flags.\n", commandUsage(c.name), c.name)
			return 2
		case errors.As(err, &le):
			fmt.Fprintf(io.err, "jetembed %s: %v\n", c.name, err)
			return exitListen
		}
		fmt.Fprintf(io.err, "jetembed %s: %v\n", c.name, err)
		if errors.Is(err, errConfig) {
			return 78
		}
		if errors.Is(err, engine.ErrFatal) {
			return exitFatal
		}
		return 1
	}
	return 0
}

// commandUsage is the usage line of a command: jetembed NAME ARGS.
func commandUsage(name string) string {
	args := commands[name].args
	if args == "" {
		args = "[flags]"
	}
	return "jetembed " + name + " " + args
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "jetembed %s — NATS JetStream work queue to BGE-M3 embeddings\n\nUsage: jetembed <command> [flags]\n\nCommands:\n", version)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(w, "\nRun 'jetembed help <command>' (or 'jetembed <command> -h') for the flags of one command.\n")
}

func init() {
	register(command{name: "version", summary: "print the version", run: func(_ context.Context, _ []string, io stdio) error {
		fmt.Fprintln(io.out, version)
		return nil
	}})
}

// cpuProvider reports whether the command line (or JETEMBED_PROVIDER)
// leaves the engine on the CPU provider, read before the flags are parsed:
// the malloc tunables are for ORT's CPU tensors, and a GPU process, whose
// host memory nothing trims, keeps glibc's defaults.
func cpuProvider(args []string) bool {
	p := os.Getenv("JETEMBED_PROVIDER")
	for i, a := range args {
		if a == "--" {
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "provider" {
			continue
		}
		if hasVal {
			p = val
		} else if i+1 < len(args) {
			p = args[i+1]
		}
	}
	return p == "" || p == "cpu"
}
