package consumer

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/schema"
)

// nopEmb returns the same dense vector for every text, so the benchmark
// measures the loop, not a model.
type nopEmb struct {
	dim  int
	embs []engine.Embedding
}

func (n *nopEmb) Embed(_ context.Context, texts []engine.Text, call engine.Call) ([]engine.Embedding, engine.CallReport, error) {
	if call.Admitted != nil {
		call.Admitted(func() {})
	}
	for len(n.embs) < len(texts) {
		n.embs = append(n.embs, engine.Embedding{Dense: make([]float32, n.dim), Tokens: 12})
	}
	ch := engine.ChunkReport{Batch: len(texts), Seq: 16, Texts: len(texts)}
	return n.embs[:len(texts)], engine.CallReport{Chunks: []engine.ChunkReport{ch}}, nil
}

func (n *nopEmb) ModelID() string { return "" }
func (n *nopEmb) MaxTokens() int  { return 0 }

type nopPub struct{}

func (nopPub) PublishResult(context.Context, string, string, map[string][]string, []byte) error {
	return nil
}
func (nopPub) PublishDLQ(context.Context, DeadLetter, map[string][]string, []byte) error { return nil }

// countMsg counts ACKs; one is shared by all deliveries.
type countMsg struct {
	acks atomic.Int64
	all  sync.WaitGroup
}

func (m *countMsg) Ack() error                       { m.acks.Add(1); m.all.Done(); return nil }
func (m *countMsg) Nak() error                       { m.all.Done(); return nil }
func (m *countMsg) NakWithDelay(time.Duration) error { m.all.Done(); return nil }
func (m *countMsg) Term() error                      { m.all.Done(); return nil }
func (m *countMsg) InProgress() error                { return nil }

// BenchmarkLoop is the consumer's cost per text around a no-op embedder:
// decode, validate, gather, result assembly, encoding, publish, ACK. Jobs
// of 16 texts of about 60 bytes, dense only: 1024 dims as BGE-M3, and 8
// dims to show the loop's own cost without the result's bulk.
func BenchmarkLoop(b *testing.B) {
	const textsPerJob = 16
	for _, tc := range []struct {
		enc schema.Encoding
		dim int
	}{{schema.EncodingMsgpack, 1024}, {schema.EncodingJSON, 1024}, {schema.EncodingMsgpack, 8}} {
		enc := tc.enc
		b.Run(fmt.Sprintf("%s/dim%d", enc, tc.dim), func(b *testing.B) {
			texts := make([]string, textsPerJob)
			for i := range texts {
				texts[i] = fmt.Sprintf("text %d: %s", i, strings.Repeat("lorem ipsum ", 4))
			}
			j := schema.NewJob("bench-job", texts...)
			// A stored job of tenant bench, answered in its results (the
			// default reply policy).
			j.Reply = "embed.results.bench.run1"
			data, err := schema.EncodeJob(j, enc)
			if err != nil {
				b.Fatal(err)
			}
			header := map[string][]string{schema.HeaderContentType: {enc.ContentType()}}
			c, err := New(Config{
				Logger: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo})),
			}, &nopEmb{dim: tc.dim}, nopPub{})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { _ = c.Run(ctx) }()
			msg := &countMsg{}
			msg.all.Add(b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := c.Submit(ctx, &Stored{Arrival: Arrival{Data: data, Header: header, Subject: "embed.jobs.bench"}, Msg: msg, NumDelivered: 1}); err != nil {
					b.Fatal(err)
				}
			}
			msg.all.Wait()
			b.StopTimer()
			if got := msg.acks.Load(); got != int64(b.N) {
				b.Fatalf("%d ACKs for %d jobs", got, b.N)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*textsPerJob), "ns/text")
		})
	}
}
