package jetstream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/schema"
)

// TestWorkerSurvivesServerCrash kills the real nats-server process under a
// running worker and starts it again: the fetch loop, the publisher and the
// micro service carry on over the reconnected connection, and no job that
// the stream had stored is lost.
func TestWorkerSurvivesServerCrash(t *testing.T) {
	p := natstest.StartProcess(t)
	srv := provisioned(t, p.URL(), nil)
	e := openEngine(t, engine.Config{})
	startWorker(t, srv, e, workerOptions{})
	c, err := client.New(srv.nc, client.WithRun("crash"))
	if err != nil {
		t.Fatal(err)
	}
	submit := func(from, to int) []string {
		var ids []string
		for i := from; i < to; i++ {
			j := schema.NewJob(fmt.Sprintf("c%02d", i), fmt.Sprintf("text %d before or after a crash", i))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := c.Submit(ctx, j)
			cancel()
			if err != nil {
				t.Fatalf("submit %s: %v", j.ID, err)
			}
			ids = append(ids, j.ID)
		}
		return ids
	}
	first := submit(0, 10)
	collect(t, c, "crash", first)

	p.Kill()
	p.Restart()
	// The stream is back once the store is recovered; jobs submitted now
	// must be pulled by the loop that lived through the crash.
	natstest.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		if !srv.nc.IsConnected() {
			return fmt.Errorf("client not reconnected")
		}
		return nil
	})
	all := append(first, submit(10, 20)...)
	got := collect(t, c, "crash", all)
	for i := 10; i < 20; i++ {
		checkResult(t, e, got[fmt.Sprintf("c%02d", i)], []string{fmt.Sprintf("text %d before or after a crash", i)}, nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := client.New(srv.nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Embed(ctx, "request after the crash"); err != nil {
		t.Errorf("request-reply after the crash: %v", err)
	}
}
