package jetstream_test

import (
	"context"
	"log"
	"time"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/jobloop"
)

// A worker on a connection of one's own: the job loop of the shared
// durable consumer and the request-reply service, with the server's
// consumer settings. The runtime package does this (and reconnects, and
// joins the fleet) for `jetembed serve`.
func ExampleStartWorker() {
	ctx := context.Background()
	nc, err := jetstream.Connect(ctx, jetstream.Options{URLs: []string{"nats://127.0.0.1:4222"}})
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	var emb engine.Embedder = engine.EmbedderFunc(func(ctx context.Context, texts []engine.Text) ([]engine.Embedding, engine.CallReport, error) {
		out := make([]engine.Embedding, len(texts))
		for i := range out {
			out[i] = engine.Embedding{Dense: []float32{1, 0}, Tokens: 2}
		}
		return out, engine.CallReport{}, nil
	})
	w, err := jetstream.StartWorker(ctx, nc, jetstream.WorkerConfig{
		Config:   jetstream.DefaultConfig(),
		Consumer: jobloop.Config{InFlightTokens: 1 << 16},
		Embedder: emb, // an *engine.Engine in a real process
	})
	if err != nil {
		log.Fatal(err)
	}
	// ... until the process is asked to stop; then drain for up to 30 s.
	grace, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := w.Stop(grace); err != nil {
		log.Print(err)
	}
	<-w.Done()
}
