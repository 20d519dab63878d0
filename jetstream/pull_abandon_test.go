package jetstream

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/internal/natstest"
)

// TestPullStoppedRequestDoesNotBurnDeliveries: a loop stopped (or drained)
// while its pull request is parked at the server leaves that request. A
// job published then must wait for the next puller with its deliveries
// intact. The loop kept the abandoned request's inbox subscribed to NAK
// what it still brought, so the server went on delivering to it: the NAK
// put the job back, the same parked request took it again, and so on
// until MaxDeliver ended the job, never handled.
func TestPullStoppedRequestDoesNotBurnDeliveries(t *testing.T) {
	for _, how := range []string{"stop", "drain"} {
		t.Run(how, func(t *testing.T) {
			srv := natstest.RunServer(t)
			// MaxDeliver 5. An AckWait of 2 s: a job the server hands the
			// leaving request in the instant before its unsubscribe lands
			// (nats.go sends it just after closing the batch the loop
			// reads) comes back to the next puller within the wait below.
			nc, js, cons := pullRig(t, srv.ClientURL(), 2*time.Second, nil)
			var requests atomic.Int32
			sink := sinkOf(func(_ context.Context, dl consumer.Delivery) error {
				t.Errorf("delivered to the stopped loop: %q", dl.(*consumer.Stored).Data)
				return nil
			})
			loop, err := Pull(context.Background(), cons, sink, PullLogger(quietLog), PullConn(nc),
				PullExpiry(5*time.Second, time.Second), PrefetchLimits(16, 16),
				func(o *pullOptions) { o.onRequest = func() { requests.Add(1) } })
			if err != nil {
				t.Fatal(err)
			}
			natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
				if requests.Load() == 0 {
					return fmt.Errorf("no pull request yet")
				}
				return nil
			})
			time.Sleep(200 * time.Millisecond) // the request is parked at the server
			if how == "stop" {
				loop.Stop()
			} else {
				loop.Drain()
			}
			<-loop.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := js.Publish(ctx, "embed.jobs.abandon", []byte("job")); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			info, err := cons.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.NumRedelivered > 0 || info.Delivered.Consumer > 1 {
				t.Errorf("with no loop running the job was delivered %d times (%d redelivered, %d pending an ack, %d pending)",
					info.Delivered.Consumer, info.NumRedelivered, info.NumAckPending, info.NumPending)
			}
			mb, err := cons.Fetch(1, natsjs.FetchMaxWait(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			var got int
			for m := range mb.Messages() {
				md, _ := m.Metadata()
				got++
				if md.NumDelivered > 2 {
					t.Errorf("the next puller got the job at its delivery %d", md.NumDelivered)
				}
				_ = m.Ack()
			}
			if got == 0 {
				t.Errorf("the job is not delivered to the next puller (%v)", mb.Error())
			}
		})
	}
}
