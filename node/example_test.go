package node_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/model"
	"github.com/jetembed/jetembed/engine/tokenizer"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/jetstream/devserver"
	"github.com/jetembed/jetembed/node"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// natsServer starts a NATS server with jetembed's objects provisioned (as
// `jetembed provision` makes them) and returns its URL and its stop.
func natsServer() (string, func()) {
	dir, err := os.MkdirTemp("", "runtime-example-")
	if err != nil {
		log.Fatal(err)
	}
	srv, err := devserver.Start(devserver.Options{Listen: "127.0.0.1:0", DataDir: dir})
	if err != nil {
		log.Fatal(err)
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := jetstream.Provision(context.Background(), js, jetstream.DefaultConfig()); err != nil {
		log.Fatal(err)
	}
	return srv.ClientURL(), func() {
		srv.Shutdown()
		srv.WaitForShutdown()
		os.RemoveAll(dir)
	}
}

// constRunner stands in for an ONNX Runtime session (engine/ort's): every
// hidden state is 1.
type constRunner struct{ dim int }

func (r constRunner) Run(_ context.Context, in engine.RunInput) (engine.RunOutput, error) {
	h := make([]float32, in.Batch*in.Seq*r.dim)
	for i := range h {
		h[i] = 1
	}
	return engine.RunOutput{Hidden: h, Dim: r.dim}, nil
}

func (constRunner) Close() error { return nil }

// openEngine opens the repository's tiny test model on constRunner
// sessions: a real engine (tokenizer, queue, heads) without ONNX Runtime.
// A program opens its model with engine/ort's sessions instead, as
// `jetembed serve` does.
func openEngine(ctx context.Context) (node.Engine, error) {
	m, err := model.Open("../testdata/models/tiny-hidden", model.DefaultOptions())
	if err != nil {
		return node.Engine{}, err
	}
	tok, err := tokenizer.Load(m.TokenizerPath)
	if err != nil {
		return node.Engine{}, err
	}
	e, err := engine.New(ctx, engine.Config{NoWarmup: true}, engine.TokenizerFunc(tok.EncodeIDs), m, func(int) (engine.Runner, error) {
		return constRunner{dim: m.Config.HiddenSize}, nil
	})
	return node.Engine{Engine: e}, err
}

// A serving process in a Go program: the config `jetembed serve` builds
// from its flags, then Run until the context ends (SIGTERM in a real
// process: signal.NotifyContext), which drains in-flight jobs within the
// grace period and returns nil.
func ExampleRun() {
	url, stop := natsServer()
	defer stop()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- node.Run(ctx, node.Config{
			NATS:    jetstream.Options{URLs: []string{url}, Logger: quiet},
			Objects: jetstream.DefaultConfig(), // what `jetembed provision` made
			Open:    openEngine,
			Loop:    consumer.Config{InteractiveTokens: 32768},
			Grace:   10 * time.Second,
			Logger:  quiet,
		})
	}()

	// A producer asks for vectors once the process serves.
	nc, err := nats.Connect(url)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	for {
		res, err := c.Embed(ctx, "hello", "world")
		if errors.Is(err, client.ErrNoService) {
			time.Sleep(10 * time.Millisecond) // still starting
			continue
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(len(res.Items), "vectors of", len(res.Items[0].Dense), "floats")
		break
	}
	cancel()
	fmt.Println("stopped:", <-done)
	// Output:
	// 2 vectors of 32 floats
	// stopped: <nil>
}

// The handle itself: Start returns once the process is ready; the service
// tells its capacity to gateways; Done would say if it ended on its own
// (Err: a fatal engine error), and Stop drains it.
func ExampleNode() {
	url, stop := natsServer()
	defer stop()

	rt, err := node.New(node.Config{
		NATS:    jetstream.Options{URLs: []string{url}, Logger: quiet},
		Objects: jetstream.DefaultConfig(),
		Open:    openEngine,
		Loop:    consumer.Config{InteractiveTokens: 4096},
		Version: "1.0.0",
		Logger:  quiet,
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rt.Start(ctx); err != nil {
		log.Fatal(err)
	}

	nc, err := nats.Connect(url)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	m, err := c.PingService(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("serving", m.Version, "with room for", m.InteractiveTokens, "interactive tokens")

	if err := rt.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	<-rt.Done()
	fmt.Println("ended on its own:", rt.Err() != nil)
	// Output:
	// serving 1.0.0 with room for 4096 interactive tokens
	// ended on its own: false
}
