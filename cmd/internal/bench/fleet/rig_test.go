package fleet

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// rig is the cluster, its provisioning and the producer's connection.
type rig struct {
	t     testing.TB
	procs []*natstest.Process
	urls  string
	cfg   jetstream.Config
	nc    *nats.Conn
	js    natsjs.JetStream
	c     *client.Client
}

// newRig starts a three-node cluster of nats-server processes and
// provisions R3 streams on it (retrying until the cluster has a meta
// leader and placed the streams).
func newRig(t testing.TB, cfg jetstream.Config) *rig {
	t.Helper()
	r := &rig{t: t, cfg: cfg}
	r.procs = natstest.StartProcessCluster(t, 3)
	r.urls = natstest.ProcessURLs(r.procs)
	var err error
	r.nc, err = nats.Connect(r.urls, nats.Name("fleet-producer"), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.nc.Close)
	if r.js, err = natsjs.New(r.nc); err != nil {
		t.Fatal(err)
	}
	// The meta leader first (a cheap request answers once there is one),
	// then the streams, retried while their placement settles.
	natstest.CheckFor(t, 60*time.Second, 100*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := r.js.AccountInfo(ctx)
		return err
	})
	natstest.CheckFor(t, 60*time.Second, 250*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := jetstream.Provision(ctx, r.js, cfg)
		return err
	})
	if r.c, err = client.New(r.nc, client.WithRun("fleet"), client.WithNames(cfg.ClientNames())); err != nil {
		t.Fatal(err)
	}
	return r
}

// push publishes the jobs asynchronously, a window at a time, and returns
// the ids in order once the stream confirmed every one.
func (r *rig) push(ctx context.Context, jobs []*schema.Job) []string {
	r.t.Helper()
	ids := make([]string, 0, len(jobs))
	const window = 2048
	for start := 0; start < len(jobs); start += window {
		var acks []natsjs.PubAckFuture
		for _, j := range jobs[start:min(start+window, len(jobs))] {
			j.Reply = r.c.ReplySubject(j.ID)
			data, err := schema.EncodeJob(j, schema.EncodingMsgpack)
			if err != nil {
				r.t.Fatal(err)
			}
			h := nats.Header(schema.JobHeader(j, schema.EncodingMsgpack))
			f, err := r.js.PublishMsgAsync(&nats.Msg{Subject: r.c.JobSubject(j.ID), Header: h, Data: data})
			if err != nil {
				r.t.Fatalf("publish %s: %v", j.ID, err)
			}
			acks = append(acks, f)
			ids = append(ids, j.ID)
		}
		for _, f := range acks {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				r.t.Fatalf("publish: %v", err)
			case <-ctx.Done():
				r.t.Fatal(ctx.Err())
			}
		}
	}
	return ids
}

// resultMsgID is the Nats-Msg-Id the consumer gives a job's result.
// (The rig's client has no tenant: its jobs' subjects name the run there.)
func (r *rig) resultMsgID(id string) string {
	return schema.ResultMsgID(r.c.Run(), r.c.ReplySubject(id), id)
}

// storedResults counts the results stream's messages by Nats-Msg-Id,
// reading headers only. A read that fails (a cluster API request can meet
// "no responders" while a leader moves) is made again from the start.
func (r *rig) storedResults(ctx context.Context) map[string]int {
	r.t.Helper()
	var out map[string]int
	natstest.CheckFor(r.t, time.Minute, time.Second, func() error {
		var err error
		out, err = r.readResults(ctx)
		return err
	})
	return out
}

func (r *rig) readResults(ctx context.Context) (map[string]int, error) {
	total, err := r.resultCount(ctx)
	if err != nil {
		return nil, fmt.Errorf("results stream: %w", err)
	}
	out := map[string]int{}
	if total == 0 {
		return out, nil
	}
	oc, err := r.js.OrderedConsumer(ctx, r.cfg.Results.Name, natsjs.OrderedConsumerConfig{HeadersOnly: true})
	if err != nil {
		return nil, fmt.Errorf("results reader: %w", err)
	}
	for read := uint64(0); read < total; {
		batch, err := oc.Fetch(4096, natsjs.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, fmt.Errorf("results fetch after %d: %w", read, err)
		}
		n := 0
		for m := range batch.Messages() {
			out[m.Headers().Get(nats.MsgIdHdr)]++
			n++
		}
		if batch.Error() != nil {
			return nil, fmt.Errorf("results batch after %d: %w", read, batch.Error())
		}
		if n == 0 {
			return nil, fmt.Errorf("results stream: read %d of %d", read, total)
		}
		read += uint64(n)
	}
	return out, nil
}

// resultCount is the results stream's message count.
func (r *rig) resultCount(ctx context.Context) (uint64, error) {
	s, err := r.js.Stream(ctx, r.cfg.Results.Name)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

// serverCPU is the CPU time each server process used so far.
func (r *rig) serverCPU() []time.Duration {
	out := make([]time.Duration, len(r.procs))
	for i, p := range r.procs {
		out[i] = procCPU(p.PID())
	}
	return out
}

// leaders names, for each node (by index), the streams and the durable
// consumer it leads: where the cluster's hotspot is.
func (r *rig) leaders(ctx context.Context) []string {
	out := make([]string, len(r.procs))
	add := func(leader, what string) {
		// StartProcessCluster names node i "<cluster>-S<i+1>".
		k := strings.LastIndex(leader, "-S")
		if k < 0 {
			return
		}
		if i, err := strconv.Atoi(leader[k+2:]); err == nil && i >= 1 && i <= len(out) {
			out[i-1] = strings.TrimPrefix(out[i-1]+", "+what, ", ")
		}
	}
	for _, name := range []string{r.cfg.Jobs.Name, r.cfg.Results.Name, "KV_" + r.cfg.Engines.Name} {
		if s, err := r.js.Stream(ctx, name); err == nil && s.CachedInfo().Cluster != nil {
			add(s.CachedInfo().Cluster.Leader, name)
		}
	}
	if c, err := r.js.Consumer(ctx, r.cfg.Jobs.Name, r.cfg.Consumer.Name); err == nil && c.CachedInfo().Cluster != nil {
		add(c.CachedInfo().Cluster.Leader, "consumer "+r.cfg.Consumer.Name)
	}
	return out
}

// procCPU reads utime+stime of a process from /proc (0 where there is no
// /proc).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces; the fields after it are plain.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ is 100 on Linux
}

// selfCPU is this process's user+system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAvg is the first three fields of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "n/a"
	}
	return strings.Join(f[:3], " ")
}

// percentile of sorted durations (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func sortedDurations(ds []time.Duration) []time.Duration {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds
}
