package faults

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/jetstream/jstest"
	"github.com/jetembed/jetembed/schema"
)

// bulk is one bulk run against a server (or cluster): the provisioned
// streams, a producer client and the ids of the jobs it queued.
type bulk struct {
	t   testing.TB
	cfg jetstream.Config
	nc  *nats.Conn
	js  natsjs.JetStream
	c   *client.Client
	run string
	ids []string
	// texts is how many texts each job holds, by id.
	texts map[string]int
}

// faultConfig is the provisioning of the fault tests: a short AckWait so a
// killed consumer's jobs come back within seconds, and no BackOff so every
// redelivery waits just AckWait.
func faultConfig(replicas int, ackWait time.Duration) jetstream.Config {
	cfg := jetstream.DefaultConfig()
	cfg.Replicas = replicas
	cfg.Consumer.AckWait = ackWait
	cfg.Consumer.BackOff = nil
	return cfg
}

// serveArgs are the flags that make serve agree with cfg; the consumer's
// settings serve reads from the server.
func serveArgs(t testing.TB, url string, cfg jetstream.Config, extra ...string) []string {
	args := append(baseServeArgs(t, url), "--replicas", fmt.Sprint(cfg.Replicas))
	return append(args, extra...)
}

// newBulk connects to url (reconnecting forever, as a producer in a fault
// must) and provisions cfg.
func newBulk(t testing.TB, url string, cfg jetstream.Config, run string) *bulk {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.Name("faults-producer"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	jstest.Provision(t, js, cfg)
	c, err := client.New(nc, client.WithRun(run), client.WithNames(cfg.ClientNames()))
	if err != nil {
		t.Fatal(err)
	}
	return &bulk{t: t, cfg: cfg, nc: nc, js: js, c: c, run: run, texts: map[string]int{}}
}

// submit queues n jobs of one to three short texts each.
func (b *bulk) submit(n int) {
	b.t.Helper()
	start := time.Now()
	for i := range n {
		id := fmt.Sprintf("%s-%05d", b.run, i)
		texts := make([]string, 1+i%3)
		for k := range texts {
			texts[k] = bulkText(i, k)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := b.c.Submit(ctx, schema.NewJob(id, texts...))
		cancel()
		if err != nil {
			b.t.Fatalf("submit %s: %v", id, err)
		}
		b.ids = append(b.ids, id)
		b.texts[id] = len(texts)
	}
	b.t.Logf("queued %d jobs in %v", n, time.Since(start).Round(time.Millisecond))
}

// bulkText is text k of job i of a run.
func bulkText(i, k int) string {
	return fmt.Sprintf("job %d text %d: the queue must not lose this one", i, k)
}

// count returns the messages stored in stream.
func (b *bulk) count(stream string) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := b.js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

// waitResults polls until the results stream holds at least n messages.
func (b *bulk) waitResults(n int, total time.Duration) {
	b.t.Helper()
	natstest.CheckFor(b.t, total, 10*time.Millisecond, func() error {
		got, err := b.count(b.cfg.Results.Name)
		if err != nil {
			return err
		}
		if got < uint64(n) {
			return fmt.Errorf("%d results stored, waiting for %d", got, n)
		}
		return nil
	})
}

// storedMsgs reads every message of stream matching filter, in order.
func storedMsgs(t testing.TB, js natsjs.JetStream, stream, filter string) []natsjs.Msg {
	t.Helper()
	var out []natsjs.Msg
	natstest.CheckFor(t, 30*time.Second, 100*time.Millisecond, func() error {
		out = out[:0]
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cfg := natsjs.OrderedConsumerConfig{}
		if filter != "" {
			cfg.FilterSubjects = []string{filter}
		}
		c, err := js.OrderedConsumer(ctx, stream, cfg)
		if err != nil {
			return err
		}
		for {
			batch, err := c.FetchNoWait(500)
			if err != nil {
				return err
			}
			n := 0
			for m := range batch.Messages() {
				out = append(out, m)
				n++
			}
			if err := batch.Error(); err != nil {
				return err
			}
			if n == 0 {
				return nil
			}
		}
	})
	return out
}

// verify reads the run's results back and asserts exactly one stored result
// per job, each a success with one vector per text, and an empty work queue
// with nothing pending. It logs the consumer's redelivery count.
func (b *bulk) verify() {
	b.t.Helper()
	msgs := storedMsgs(b.t, b.js, b.cfg.Results.Name, "embed.results."+b.run+".>")
	seen := map[string]int{}
	for _, m := range msgs {
		id := m.Headers().Get(schema.HeaderJobID)
		seen[id]++
		if seen[id] > 1 {
			continue
		}
		r, err := schema.DecodeResult(m.Data(), schema.EncodingFor(m.Headers().Get(schema.HeaderContentType)))
		if err != nil {
			b.t.Errorf("result %s: %v", id, err)
			continue
		}
		if r.ID != id || r.Error != nil || len(r.Items) != b.texts[id] {
			b.t.Errorf("result %s: id %q, error %v, %d items (want %d)", id, r.ID, r.Error, len(r.Items), b.texts[id])
			continue
		}
		for i, it := range r.Items {
			if it.Error != nil || len(it.Dense) == 0 {
				b.t.Errorf("result %s item %d: error %v, %d dense values", id, i, it.Error, len(it.Dense))
			}
		}
	}
	var lost, dup []string
	for _, id := range b.ids {
		switch seen[id] {
		case 0:
			lost = append(lost, id)
		case 1:
		default:
			dup = append(dup, id)
		}
		delete(seen, id)
	}
	var stray []string
	for id := range seen {
		stray = append(stray, id)
	}
	sort.Strings(stray)
	if len(lost) > 0 || len(dup) > 0 || len(stray) > 0 {
		b.t.Errorf("%d jobs: %d lost %v, %d with several results %v, %d stray results %v",
			len(b.ids), len(lost), head(lost), len(dup), head(dup), len(stray), head(stray))
	}
	natstest.CheckFor(b.t, 20*time.Second, 50*time.Millisecond, func() error {
		n, err := b.count(b.cfg.Jobs.Name)
		if err != nil {
			return err
		}
		info, err := b.consumerInfo()
		if err != nil {
			return err
		}
		if n != 0 || info.NumAckPending != 0 || info.NumPending != 0 {
			return fmt.Errorf("work queue: %d jobs stored, %d ack pending, %d pending", n, info.NumAckPending, info.NumPending)
		}
		return nil
	})
	if info, err := b.consumerInfo(); err == nil {
		b.t.Logf("%d jobs, %d results stored; %d deliveries (%d beyond the first of each job)",
			len(b.ids), len(msgs), info.Delivered.Consumer, info.Delivered.Consumer-min(info.Delivered.Consumer, uint64(len(b.ids))))
	}
}

func (b *bulk) consumerInfo() (*natsjs.ConsumerInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := b.js.Consumer(ctx, b.cfg.Jobs.Name, b.cfg.Consumer.Name)
	if err != nil {
		return nil, err
	}
	return c.Info(ctx)
}

// head shortens a list of ids for a failure message.
func head(ids []string) string {
	if len(ids) > 8 {
		return strings.Join(ids[:8], " ") + " ..."
	}
	return strings.Join(ids, " ")
}
