package jetstream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/schema"
)

// TestNewMetricsOnOwnSDK: a program that runs a Worker with its own
// OpenTelemetry SDK gets jetembed's job-loop metrics through the public
// consumer.NewMetrics, with only public names.
func TestNewMetricsOnOwnSDK(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	m, err := consumer.NewMetrics(mp)
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, nil)
	e := openEngine(t, engine.Config{})
	var cc consumer.Config
	cc.Metrics = m
	startWorker(t, srv, e, workerOptions{cfg: cc})
	c, err := client.New(srv.nc, client.WithRun("metrics"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Submit(ctx, schema.NewJob("m-1", "hello", "world")); err != nil {
		t.Fatal(err)
	}
	collect(t, c, "metrics", []string{"m-1"})
	// The job is counted when it is ACKed, just after its result is stored.
	natstest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		if n := okJobs(t, reader); n != 1 {
			return fmt.Errorf("jetembed_jobs_total{outcome=ok} = %d on the program's own SDK, want 1", n)
		}
		return nil
	})
}

// okJobs reads jetembed_jobs_total{outcome="ok"} from reader.
func okJobs(t *testing.T, reader *sdkmetric.ManualReader) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var jobs int64
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if sum, ok := mt.Data.(metricdata.Sum[int64]); ok && mt.Name == "jetembed_jobs_total" {
				for _, dp := range sum.DataPoints {
					if v, _ := dp.Attributes.Value("outcome"); v.AsString() == string(schema.OutcomeOK) {
						jobs += dp.Value
					}
				}
			}
		}
	}
	return jobs
}
