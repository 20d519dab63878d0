package jetstream_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/jetstream/devserver"
)

// A worker on a connection of one's own: the job loop of the shared
// durable consumer and the request-reply service, run with the server's
// consumer settings. Package node does this (and reconnects, and joins
// the fleet) for `jetembed serve`; here the Embedder is a function, where a
// real process passes its *engine.Engine.
func ExampleStartWorker() {
	dir, err := os.MkdirTemp("", "worker-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := devserver.Start(devserver.Options{Listen: "127.0.0.1:0", DataDir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Shutdown()

	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	nc, err := jetstream.Connect(ctx, jetstream.Options{URLs: []string{srv.ClientURL()}, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	cfg := jetstream.DefaultConfig()
	if _, err := jetstream.Provision(ctx, js, cfg); err != nil { // `jetembed provision`
		log.Fatal(err)
	}

	emb := engine.EmbedderFunc(func(ctx context.Context, texts []engine.Text) ([]engine.Embedding, engine.CallReport, error) {
		out := make([]engine.Embedding, len(texts))
		for i, t := range texts {
			out[i] = engine.Embedding{Dense: []float32{float32(len(t.Text)), 1}, Tokens: 2}
		}
		return out, engine.CallReport{}, nil
	})
	w, err := jetstream.StartWorker(ctx, nc, jetstream.WorkerConfig{
		Config:   cfg,
		Consumer: consumer.Config{InFlightTokens: 1 << 16},
		Embedder: emb,
		Logger:   quiet,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("ack wait from the server:", w.Settings().AckWait)

	c, err := client.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.Embed(ctx, "hello")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Items[0].Dense)

	// Stop drains: in-flight jobs get up to the grace to finish.
	grace, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := w.Stop(grace); err != nil {
		log.Print(err)
	}
	<-w.Done()
	fmt.Println("stopped:", w.Err())
	// Output:
	// ack wait from the server: 1m0s
	// [5 1]
	// stopped: <nil>
}
