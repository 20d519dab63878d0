package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/schema"
)

// TestInboundRoundRobinAndBounds: waiting requests are handed out one
// tenant at a time in turn, a tenant with nothing waiting is served before
// the next turn of the others, and each tenant's queue is bounded in
// requests and bytes, as are all of them together; one tenant's first
// request always fits.
func TestInboundRoundRobinAndBounds(t *testing.T) {
	q := newInbound(3, 1000, 7000)
	put := func(tenant string, size int64) error {
		return q.put(queued{tenant: tenant, size: size, received: time.Now()})
	}
	for i := range 3 {
		if err := put("a", 100); err != nil {
			t.Fatalf("a's request %d: %v", i, err)
		}
	}
	if err := put("a", 100); !errors.Is(err, errQueueFull) {
		t.Errorf("a's fourth request: %v, want its queue full", err)
	}
	if err := put("b", 900); err != nil {
		t.Errorf("b's first request: %v", err)
	}
	if err := put("b", 200); !errors.Is(err, errQueueFull) {
		t.Errorf("b's second request over its bytes: %v, want full", err)
	}
	if err := put("c", 5000); err != nil {
		t.Errorf("c's first request, larger than its share: %v", err)
	}
	if err := put("d", 1000); !errors.Is(err, errQueueFull) {
		t.Errorf("d's first request over the total: %v, want full", err)
	}
	var order []string
	for range 4 {
		it, ok := q.take()
		if !ok {
			t.Fatal("closed")
		}
		order = append(order, it.tenant)
	}
	// Each tenant that had nothing waiting joined before the next turn.
	if got := strings.Join(order, ""); got != "cbaa" {
		t.Errorf("order %q, want c, b (new) before a's turns", got)
	}
	_ = put("a", 100)
	_ = put("a", 100)
	_ = put("d", 100)
	it, _ := q.take()
	if it.tenant != "d" {
		t.Errorf("took %s's, want d's (nothing waited for d)", it.tenant)
	}
	if left := q.close(); len(left) != 3 {
		t.Errorf("close returned %d waiting requests, want 3", len(left))
	}
	if _, ok := q.take(); ok {
		t.Error("take after close")
	}
	if err := put("a", 1); !errors.Is(err, errStopping) {
		t.Errorf("put after close: %v", err)
	}
}

// countingMetrics records [ServiceMetrics] by reason.
type countingMetrics struct {
	mu            sync.Mutex
	dropped, shed map[string]int
}

func (m *countingMetrics) RequestsDropped(_ context.Context, reason string, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dropped == nil {
		m.dropped = map[string]int{}
	}
	m.dropped[reason] += n
}

func (m *countingMetrics) RequestsShed(_ context.Context, reason string, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.shed == nil {
		m.shed = map[string]int{}
	}
	m.shed[reason] += n
}

func (m *countingMetrics) get(dropped bool, reason string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if dropped {
		return m.dropped[reason]
	}
	return m.shed[reason]
}

// TestSlowSubscriptionDropsCounted: what nats.go drops over a service
// subscription's pending limits is counted, every message of it, and
// logged as a warning; other subscriptions are not the service's.
func TestSlowSubscriptionDropsCounted(t *testing.T) {
	s := natstest.RunServer(t, natstest.WithoutJetStream())
	nc, err := nats.Connect(s.ClientURL(), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var log natstest.Buffer
	m := &countingMetrics{}
	slow := watchSlow(nc, func(subject string) bool { return subject == "svc.slow" }, m, slog.New(slog.NewTextHandler(&log, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { slow.run(ctx); close(done) }()
	block := make(chan struct{})
	var handled atomic.Int64
	sub, err := nc.Subscribe("svc.slow", func(*nats.Msg) { <-block; handled.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(2, 1<<20); err != nil {
		t.Fatal(err)
	}
	pub, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	for range 50 {
		if err := pub.Publish("svc.slow", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if n, _ := sub.Dropped(); n < 40 {
			return fmt.Errorf("%d dropped", n)
		}
		return nil
	})
	close(block)
	// Every message is handled or dropped before the drops are final:
	// the server may still be delivering when the first 40 are gone.
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if n, _ := sub.Dropped(); handled.Load()+int64(n) != 50 {
			return fmt.Errorf("%d handled, %d dropped of 50", handled.Load(), n)
		}
		return nil
	})
	dropped, _ := sub.Dropped()
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if got := m.get(true, DropSlowConsumer); got != dropped {
			return fmt.Errorf("counted %d of %d dropped", got, dropped)
		}
		return nil
	})
	cancel()
	<-done
	if !strings.Contains(log.String(), "slow consumer") || !strings.Contains(log.String(), "svc.slow") {
		t.Errorf("no warning of the drops: %s", log.String())
	}
}

// blockingSink holds every delivery until released, recording the order
// they came in.
type blockingSink struct {
	mu      sync.Mutex
	order   []consumer.Delivery
	release chan struct{}
	came    atomic.Int32
}

func (s *blockingSink) Submit(_ context.Context, d consumer.Delivery) error {
	s.mu.Lock()
	s.order = append(s.order, d)
	s.mu.Unlock()
	s.came.Add(1)
	<-s.release
	return nil
}

// TestServiceDoorShedsAndTakesTurns: while one tenant's requests wait
// (its queue bounded), its excess is answered overloaded at once, without
// reaching the job loop, and another tenant's request is handed on before
// the rest of the first tenant's; a request whose reply is outside its
// tenant's space goes to the job loop refused (bad_reply), or, over a
// full queue, is only counted; one without a reply is counted.
func TestServiceDoorShedsAndTakesTurns(t *testing.T) {
	s := natstest.RunServer(t, natstest.WithoutJetStream())
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sink := &blockingSink{release: make(chan struct{})}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(sink.release) }) }
	m := &countingMetrics{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	svc, err := StartService(ctx, nc, sink, ServiceOptions{TenantQueue: 2, Metrics: m, NoRerank: true})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	defer release()
	rc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	answers, err := rc.SubscribeSync("_INBOX_a.>")
	if err != nil {
		t.Fatal(err)
	}
	req := func(tenant, reply string) {
		t.Helper()
		if err := rc.PublishMsg(&nats.Msg{Subject: schema.SubjectEmbed + "." + tenant, Reply: reply,
			Header: nats.Header{schema.HeaderContentType: {schema.MediaTypeJSON}}, Data: []byte(`{"id":"x","texts":["x"]}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// The workers take a's first ones and block in the job loop; two more
	// wait; the rest is shed.
	workers := serviceWorkers()
	for i := range workers {
		req("a", fmt.Sprintf("_INBOX_a.w%d", i))
	}
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if n := sink.came.Load(); n != int32(workers) {
			return fmt.Errorf("%d deliveries, want %d", n, workers)
		}
		return nil
	})
	for i := range 2 + 5 {
		req("a", fmt.Sprintf("_INBOX_a.r%d", i))
	}
	if err := rc.Flush(); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if n := m.get(false, ShedQueueFull); n != 5 {
			return fmt.Errorf("%d shed, want 5", n)
		}
		return nil
	})
	for range 5 {
		msg, err := answers.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if msg.Header.Get(schema.HeaderErrorCode) != string(schema.CodeOverloaded) {
			t.Errorf("shed answer %s %v: want overloaded", msg.Data, msg.Header)
		}
	}
	req("a", "_INBOX_b.stolen") // a's queue is full: only counted
	req("b", "_INBOX_b.r0")
	req("b", "_INBOX_a.stolen") // queued, refused in the job loop
	req("b", "")                // no reply: counted
	if err := rc.Flush(); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if m.get(true, DropRefusedReply) != 1 || m.get(true, DropNoReply) != 1 {
			return fmt.Errorf("dropped %v", m.dropped)
		}
		return nil
	})
	// One worker at a time goes on, so the deliveries come in the order
	// the workers took them.
	for n := workers + 1; n <= workers+4; n++ {
		sink.release <- struct{}{}
		natstest.CheckFor(t, 5*time.Second, time.Millisecond, func() error {
			if got := sink.came.Load(); got != int32(n) {
				return fmt.Errorf("%d deliveries, want %d", got, n)
			}
			return nil
		})
	}
	release()
	sink.mu.Lock()
	defer sink.mu.Unlock()
	var order []string
	for _, dl := range sink.order[workers:] {
		d := dl.(*consumer.Request)
		who := d.Tenant
		if d.Refusal != nil {
			who += "!" + string(d.Refusal.Code)
		}
		order = append(order, who)
	}
	// b joined the turn before a's next: b, then a and b alternate.
	if got := strings.Join(order, " "); got != "b a b!bad_reply a" {
		t.Errorf("deliveries after the workers' first: %s", got)
	}
	if msg, err := answers.NextMsg(200 * time.Millisecond); err == nil {
		t.Errorf("unexpected answer on a's inbox: %s %s", msg.Subject, msg.Data)
	}
}
