package jetstream_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/ort/enginetest"
	"github.com/jetembed/jetembed/engine/tokenizer"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// lostSettle is a message whose first settlement never reaches the server:
// the process died after the job's result and usage were stored, before
// its ACK (or TERM) went out.
type lostSettle struct{ consumer.Message }

func (lostSettle) Ack() error  { return nil }
func (lostSettle) Term() error { return nil }

// TestUsageOnceAcrossRedelivery: every job's first settlement is lost, so
// every job runs twice, and its usage is stored twice; the usage stream
// keeps one event a job (the second has the first's Nats-Msg-Id: its
// stream and sequence), and the sums are the real tokens of the texts
// exactly. A job refused for bad input is counted once too, under its
// code, with what it ran (nothing).
func TestUsageOnceAcrossRedelivery(t *testing.T) {
	srv := newServer(t, func(c *jetstream.Config) { c.Consumer.AckWait = time.Second })
	var mu sync.Mutex
	deliveries := map[string]int{}
	startWorker(t, srv, openEngine(t, engine.Config{}), workerOptions{sink: func(l *consumer.Loop) jetstream.Sink {
		return sinkFunc(func(ctx context.Context, in consumer.Delivery) error {
			d, ok := in.(*consumer.Stored)
			if !ok {
				return l.Submit(ctx, in)
			}
			mu.Lock()
			deliveries[d.Subject]++
			mu.Unlock()
			if d.NumDelivered == 1 {
				d.Msg = lostSettle{d.Msg}
			}
			return l.Submit(ctx, d)
		})
	}})

	tok, err := tokenizer.Load(filepath.Join(enginetest.ModelDir("tiny-hidden"), "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*jetstream.UsageRow{}
	// ran are the real tokens of each tenant's distinct texts: what its
	// jobs ran at least, since a text two of its jobs hold at once runs
	// once (compute-once) and is counted in each job's tokens, in its
	// padded tokens only where it ran.
	ran, seen := map[string]int64{}, map[string]bool{}
	for i, tenant := range []string{"acme", "acme", "globex"} {
		texts := []string{fmt.Sprintf("the first text of job %d", i), "a second, somewhat longer text that every job shares"}
		subject := fmt.Sprintf("embed.jobs.%s.r.j%d", tenant, i)
		data := fmt.Sprintf(`{"v":1,"id":"j%d","texts":["%s","%s"],"reply":"embed.results.%s.r.j%d"}`, i, texts[0], texts[1], tenant, i)
		publishRaw(t, srv.js, subject, map[string][]string{schema.HeaderContentType: {"application/json"}}, []byte(data))
		w := want[tenant]
		if w == nil {
			w = &jetstream.UsageRow{Tenant: tenant}
			want[tenant] = w
		}
		w.Jobs++
		for _, text := range texts {
			ids, _ := tok.EncodeIDs(text, 0)
			w.Texts++
			w.Tokens += int64(len(ids))
			if !seen[tenant+"\x00"+text] {
				seen[tenant+"\x00"+text] = true
				ran[tenant] += int64(len(ids))
			}
		}
	}
	publishRaw(t, srv.js, "embed.jobs.globex.r.bad", map[string][]string{schema.HeaderContentType: {"application/json"}},
		[]byte(`{"v":1,"id":"bad","texts":[]}`))
	want["globex"].Jobs++

	natstest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		for subject, n := range deliveries {
			if n < 2 {
				return fmt.Errorf("%s delivered %d times", subject, n)
			}
		}
		if len(deliveries) != 4 {
			return fmt.Errorf("%d jobs delivered", len(deliveries))
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	jc, err := srv.js.Consumer(ctx, srv.cfg.Jobs.Name, srv.cfg.Consumer.Name)
	if err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		info, err := jc.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumAckPending != 0 || info.NumPending != 0 {
			return fmt.Errorf("%d jobs ack pending, %d pending", info.NumAckPending, info.NumPending)
		}
		return nil
	})

	rep, err := jetstream.ReadUsage(ctx, srv.js, jetstream.UsageQuery{Total: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Events != 4 || rep.Skipped != 0 || len(rep.Rows) != 2 {
		t.Fatalf("usage: %d events (%d skipped), rows %+v; want 4 events of 2 tenants: one a job, whatever its deliveries", rep.Events, rep.Skipped, rep.Rows)
	}
	for _, r := range rep.Rows {
		w := want[r.Tenant]
		if w == nil || r.Jobs != w.Jobs || r.Texts != w.Texts || r.Tokens != w.Tokens {
			t.Errorf("tenant %s: %d jobs, %d texts, %d tokens; want %+v", r.Tenant, r.Jobs, r.Texts, r.Tokens, w)
			continue
		}
		if r.PaddedTokens < ran[r.Tenant] || r.ComputeSeconds <= 0 {
			t.Errorf("tenant %s: %d padded tokens for %d tokens of distinct texts, %v compute seconds", r.Tenant, r.PaddedTokens, ran[r.Tenant], r.ComputeSeconds)
		}
		wantFailed := map[schema.Code]int64(nil)
		if r.Tenant == "globex" {
			wantFailed = map[schema.Code]int64{schema.CodeEmptyJob: 1}
		}
		if fmt.Sprint(r.Failed) != fmt.Sprint(wantFailed) {
			t.Errorf("tenant %s: failed %v, want %v", r.Tenant, r.Failed, wantFailed)
		}
	}

	// One tenant's usage, per hour: the filter reads its subject only.
	one, err := jetstream.ReadUsage(ctx, srv.js, jetstream.UsageQuery{Tenant: "acme", Since: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if one.Events != 2 || len(one.Rows) != 1 || one.Rows[0].Tenant != "acme" || one.Rows[0].Hour.IsZero() {
		t.Errorf("acme's usage of the last hour: %+v", one)
	}
}

// TestReadUsageLargeRecords: records far larger than a usage event (only
// the fleet's own credentials may write the stream, but a reader takes
// nothing on trust) are skipped, and never make the reader lose events:
// unbounded in bytes, one pull of 512 messages overflowed its
// subscription's pending limit and dropped events without an error.
func TestReadUsageLargeRecords(t *testing.T) {
	srv := newServer(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	junk := make([]byte, 1000<<10)
	ev, err := schema.EncodeUsageEvent(schema.UsageEvent{V: schema.UsageVersion, Tenant: "acme", Texts: 1, Tokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	const n = 256 // 256 MB of junk: four times the 64 MiB a subscription holds
	for i := range n {
		if _, err := srv.js.Publish(ctx, "embed.usage.acme", junk); err != nil {
			t.Fatal(i, err)
		}
		if _, err := srv.js.Publish(ctx, "embed.usage.acme", ev); err != nil {
			t.Fatal(i, err)
		}
	}
	rep, err := jetstream.ReadUsage(ctx, srv.js, jetstream.UsageQuery{Total: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Events != n || rep.Skipped != n || len(rep.Rows) != 1 || rep.Rows[0].Tokens != 3*n {
		t.Fatalf("usage: %d events, %d skipped, rows %+v; want %d events of acme (%d tokens) and %d skipped", rep.Events, rep.Skipped, rep.Rows, n, 3*n, n)
	}
}

// TestReadUsageRecordOverBound: a record over the pull's byte bound stops
// the read with an error that says so, rather than a report that misses
// it.
func TestReadUsageRecordOverBound(t *testing.T) {
	defer jetstream.SetUsageFetchBytes(jetstream.SetUsageFetchBytes(64 << 10))
	srv := newServer(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ev, err := schema.EncodeUsageEvent(schema.UsageEvent{V: schema.UsageVersion, Tenant: "acme", Texts: 1, Tokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range [][]byte{ev, ev, make([]byte, 100<<10), ev} {
		if _, err := srv.js.Publish(ctx, "embed.usage.acme", data); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := jetstream.ReadUsage(ctx, srv.js, jetstream.UsageQuery{Total: true})
	if err == nil || !strings.Contains(err.Error(), "over 65536 bytes") {
		t.Fatalf("ReadUsage: %+v, %v; want an error naming the bound", rep, err)
	}
}
