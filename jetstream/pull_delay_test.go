package jetstream

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/internal/natstest"
)

// TestPullRequestDelayedLosesNothing: the loop's connection reaches the
// server with half a second of delay (a loaded server, a long way), so
// each pull request arrives there late and is open at the server longer
// than the client waited for it when the client set the end. A job
// published in that gap went to a request the client had already left:
// delivered to an inbox nobody read, it came back only after AckWait. The
// loop now takes a request to its end at the server (the server's 408),
// so each job is delivered once, at once.
func TestPullRequestDelayedLosesNothing(t *testing.T) {
	// The first heartbeat comes delay + heartbeat after the request left,
	// and nats.go gives up at twice the heartbeat: half a second of margin
	// for a loaded machine.
	const delay, expiry, heartbeat = 500 * time.Millisecond, 2500 * time.Millisecond, time.Second
	srv := natstest.RunServer(t)
	_, _, direct := pullRig(t, srv.ClientURL(), 30*time.Second, nil)
	nc, err := nats.Connect("nats://" + delayedProxy(t, srv.Addr().String(), delay))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ictx, icancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer icancel()
	cons, err := js.Consumer(ictx, direct.CachedInfo().Stream, direct.CachedInfo().Name)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	pjs, err := natsjs.New(pub)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const jobs = 3
	got := make(chan *consumer.Stored, 2*jobs)
	sink := sinkOf(func(_ context.Context, dl consumer.Delivery) error {
		d := dl.(*consumer.Stored)
		got <- d
		return d.Msg.Ack()
	})
	var (
		mu        sync.Mutex
		requests  int
		published = map[string]time.Time{}
		pubs      sync.WaitGroup
	)
	defer pubs.Wait()
	// Each job is published a little after the client's end of a request
	// (expiry) and before the server's (the request came in delay late).
	loop, err := Pull(context.Background(), cons, sink, PullLogger(quietLog), PullExpiry(expiry, heartbeat),
		func(o *pullOptions) {
			o.onRequest = func() {
				mu.Lock()
				defer mu.Unlock()
				requests++
				if requests > jobs {
					return
				}
				id := fmt.Sprintf("job %d", requests)
				pubs.Add(1)
				time.AfterFunc(expiry+delay/5, func() {
					defer pubs.Done()
					mu.Lock()
					published[id] = time.Now()
					mu.Unlock()
					if _, err := pjs.Publish(ctx, "embed.jobs.delayed", []byte(id)); err != nil {
						t.Error(err)
					}
				})
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	defer loop.Stop()
	for range jobs {
		select {
		case d := <-got:
			mu.Lock()
			took := time.Since(published[string(d.Data)])
			mu.Unlock()
			if d.NumDelivered != 1 {
				t.Errorf("%s delivered %d times, %v after it was published", d.Data, d.NumDelivered, took.Round(time.Millisecond))
			}
		case <-time.After(3 * expiry):
			t.Fatalf("a job not delivered in %v: it went to a pull request the loop had left", 3*expiry)
		}
	}
}

// delayedProxy forwards TCP connections to addr, holding every byte the
// client sends for delay (in order); what the server sends passes at once.
// It returns its address.
func delayedProxy(t *testing.T, addr string, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		conns.Wait()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			conns.Add(3)
			type chunk struct {
				at   time.Time
				data []byte
			}
			held := make(chan chunk, 1024)
			go func() { // client -> held
				defer conns.Done()
				defer close(held)
				for {
					buf := make([]byte, 32<<10)
					n, err := c.Read(buf)
					if n > 0 {
						held <- chunk{time.Now().Add(delay), buf[:n]}
					}
					if err != nil {
						return
					}
				}
			}()
			go func() { // held -> server, each chunk at its time
				defer conns.Done()
				defer s.Close()
				for ch := range held {
					time.Sleep(time.Until(ch.at))
					if _, err := s.Write(ch.data); err != nil {
						return
					}
				}
			}()
			go func() { // server -> client
				defer conns.Done()
				defer c.Close()
				_, _ = io.Copy(c, s)
			}()
		}
	}()
	return ln.Addr().String()
}
