package runtime_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/jobloop"
	"github.com/jetembed/jetembed/runtime"
)

// openEngine stands for the program's own engine opening (model,
// tokenizer, ONNX Runtime sessions: what `jetembed serve` does with
// engine/model, engine/tokenizer and engine/ort).
func openEngine(context.Context) (*engine.Engine, error) { return nil, nil }

// A serving process in a Go program: the config `jetembed serve` builds
// from its flags, then Run until SIGTERM, which drains in-flight jobs
// within the grace period.
func ExampleRun() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := runtime.Run(ctx, runtime.Config{
		NATS:    jetstream.Options{URLs: []string{"nats://127.0.0.1:4222"}},
		Objects: jetstream.DefaultConfig(), // provisioned by `jetembed provision`
		Open: func(ctx context.Context) (runtime.Engine, error) {
			e, err := openEngine(ctx)
			return runtime.Engine{Engine: e}, err
		},
		Loop: jobloop.Config{InteractiveTokens: 32768},
		HTTP: "127.0.0.1:9090", // /healthz, /readyz
	})
	if err != nil {
		log.Fatal(err)
	}
}

// The handle itself: Start returns once the process is ready; Done says
// when it ended on its own (a fatal engine error), and Stop drains it.
func ExampleRuntime() {
	rt, err := runtime.New(runtime.Config{
		Objects: jetstream.DefaultConfig(),
		Open: func(ctx context.Context) (runtime.Engine, error) {
			e, err := openEngine(ctx)
			return runtime.Engine{Engine: e}, err
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := rt.Start(ctx); err != nil {
		log.Fatal(err)
	}
	<-rt.Done() // or: whatever ends this process
	if err := rt.Stop(ctx); err != nil {
		log.Fatal(err)
	}
}
