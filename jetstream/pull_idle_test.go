package jetstream

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/internal/natstest"
)

// TestPullAfterSilence: pull requests expire while nothing is published
// and the loop issues new ones; a job after the silence is delivered once.
func TestPullAfterSilence(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js, cons := pullRig(t, srv.ClientURL(), time.Minute, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var requests atomic.Int32
	got := make(chan *consumer.Stored, 1)
	sink := sinkOf(func(_ context.Context, dl consumer.Delivery) error {
		d := dl.(*consumer.Stored)
		got <- d
		return d.Msg.Ack()
	})
	loop, err := Pull(context.Background(), cons, sink, PullLogger(quietLog), PullExpiry(200*time.Millisecond, 50*time.Millisecond),
		func(o *pullOptions) { o.onRequest = func() { requests.Add(1) } })
	if err != nil {
		t.Fatal(err)
	}
	defer loop.Stop()
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := requests.Load(); n < 3 {
			return fmt.Errorf("%d pull requests", n)
		}
		return nil
	})
	if _, err := js.Publish(ctx, "embed.jobs.idle", []byte("after the silence")); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-got:
		if string(d.Data) != "after the silence" || d.NumDelivered != 1 {
			t.Errorf("delivered %q, %d times", d.Data, d.NumDelivered)
		}
	case <-ctx.Done():
		t.Fatal("no delivery after the silence")
	}
}

// TestPullIdleReopenLosesNothing: a job published right after the loop
// replaced an idle pull request is delivered once. The loop before the fix
// reopened its iterator after 30s of silence while the old pull request
// was still open at the server; with leaf nodes (or gateways) on, the
// server hands messages to a request whose inbox lost interest for 2s
// after the request came in (the interest may be on its way over a leaf
// connection), so the job went to the dead inbox and came back only after
// AckWait: "exactly 60s late", delivered twice. Now a request is replaced
// only after it ended at the server.
func TestPullIdleReopenLosesNothing(t *testing.T) {
	srv := natstest.RunServer(t, func(o *server.Options) { o.LeafNode.Host, o.LeafNode.Port = "127.0.0.1", -1 })
	_, _, cons := pullRig(t, srv.ClientURL(), 2*time.Second, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const rounds = 8
	got := make(chan *consumer.Stored, 4*rounds)
	sink := sinkOf(func(_ context.Context, dl consumer.Delivery) error {
		d := dl.(*consumer.Stored)
		got <- d
		return d.Msg.Ack()
	})
	pub, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	pjs, err := natsjs.New(pub)
	if err != nil {
		t.Fatal(err)
	}
	// A job at various instants after each new request, once the first
	// few requests expired idle.
	offsets := []time.Duration{0, 0, time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond}
	var requests atomic.Int32
	// A job can reach the sink before its publisher has the ack: wait for
	// the publishes before the publisher's connection closes.
	var publishing sync.WaitGroup
	defer publishing.Wait()
	// The loop's request ends at the client when its context does, and
	// nats.go asks the server for 90% of that: the server's request ends
	// first by a tenth of the expiry. At 150 ms that was 15 ms (and a
	// missed heartbeat 100 ms), which a loaded machine's delay of the
	// request outlasts: the old request was still open at the server when
	// the next job came, which is the lost job this test is about, made by
	// the load (a package run under two busy loops: "job 7 (+1ms) delivered 2 times"). A second gives
	// 100 ms, and 500 ms of heartbeats.
	loop, err := Pull(context.Background(), cons, sink, PullLogger(quietLog), PullExpiry(time.Second, 250*time.Millisecond),
		func(o *pullOptions) {
			o.onRequest = func() {
				n := int(requests.Add(1))
				if n < 3 || n%2 == 0 || (n-3)/2 >= rounds {
					return // idle requests in between, which expire
				}
				d := offsets[(n-3)/2]
				publishing.Add(1)
				time.AfterFunc(d, func() {
					defer publishing.Done()
					if _, err := pjs.Publish(ctx, "embed.jobs.reopen", fmt.Appendf(nil, "job %d (+%v)", n, d)); err != nil {
						t.Error(err)
					}
				})
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	defer loop.Stop()
	for i := 0; i < rounds; i++ {
		select {
		case d := <-got:
			if d.NumDelivered != 1 {
				t.Errorf("%s delivered %d times", d.Data, d.NumDelivered)
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d jobs delivered", i, rounds)
		}
	}
}

// pullRig connects to url with opts, provisions the streams with ackWait
// and no BackOff (then edit), and returns the connection, its JetStream
// API and the jobs consumer.
func pullRig(t *testing.T, url string, ackWait time.Duration, edit func(*Config), opts ...nats.Option) (*nats.Conn, natsjs.JetStream, natsjs.Consumer) {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := DefaultConfig()
	cfg.Consumer.BackOff = nil
	cfg.Consumer.AckWait = ackWait
	if edit != nil {
		edit(&cfg)
	}
	if _, err := Provision(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, cfg.Jobs.Name, cfg.Consumer.Name)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js, cons
}

type sinkOf func(context.Context, consumer.Delivery) error

func (f sinkOf) Submit(ctx context.Context, d consumer.Delivery) error { return f(ctx, d) }

// TestPullClusteredConsumer: on a replicated consumer the server delivers
// a job only once the delivery is replicated, while a status it sends
// (such as the 409 that ends a byte-limited request) goes out at once; a
// request must not end before its jobs arrive. Every job comes once.
func TestPullClusteredConsumer(t *testing.T) {
	c := natstest.RunCluster(t, 3)
	nc, js, cons := pullRig(t, c.URLs(), 5*time.Second, func(cfg *Config) { cfg.Replicas = 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const jobs = 300
	for i := range jobs {
		if _, err := js.Publish(ctx, "embed.jobs.cluster", fmt.Appendf(nil, "job %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]uint64{}
	sink := sinkOf(func(_ context.Context, dl consumer.Delivery) error {
		d := dl.(*consumer.Stored)
		mu.Lock()
		seen[string(d.Data)] = max(seen[string(d.Data)], d.NumDelivered)
		mu.Unlock()
		return d.Msg.Ack()
	})
	loop, err := Pull(context.Background(), cons, sink, PullLogger(quietLog), PullConn(nc), PrefetchLimits(16, 16))
	if err != nil {
		t.Fatal(err)
	}
	defer loop.Stop()
	natstest.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != jobs {
			return fmt.Errorf("%d of %d jobs", len(seen), jobs)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	for job, n := range seen {
		if n != 1 {
			t.Errorf("%s delivered %d times", job, n)
		}
	}
}
