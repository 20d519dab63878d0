package jetstream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/schema"
)

// BenchmarkPipeline measures the whole NATS path on the tiny model: jobs of
// eight short texts queued in the jobs stream, pulled, packed, embedded,
// published to the results stream and read back. The tiny model makes the
// NATS and consumer overhead visible rather than the model's cost.
func BenchmarkPipeline(b *testing.B) {
	srv := newServer(b, nil)
	e := openEngine(b, engine.Config{})
	startWorker(b, srv, e, workerOptions{cfg: consumer.Config{Logger: quiet}})
	c, err := client.New(srv.nc, client.WithRun("bench"))
	if err != nil {
		b.Fatal(err)
	}
	texts := make([]string, 8)
	for i := range texts {
		texts[i] = fmt.Sprintf("benchmark text %d with a handful of words in it", i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	go func() {
		for i := range b.N {
			if _, err := c.Submit(ctx, schema.NewJob(fmt.Sprint(i), texts...)); err != nil {
				b.Error(err)
				return
			}
		}
	}()
	n := 0
	for sr, err := range c.Results(ctx, "bench") {
		if err != nil {
			b.Fatal(err)
		}
		if sr.Error != nil {
			b.Fatal(sr.Error)
		}
		if n++; n == b.N {
			break
		}
	}
	b.StopTimer()
	secs := time.Since(start).Seconds()
	b.ReportMetric(float64(b.N)/secs, "jobs/s")
	b.ReportMetric(float64(b.N*len(texts))/secs, "texts/s")
}
