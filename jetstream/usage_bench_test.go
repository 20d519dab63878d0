package jetstream_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// The per-job stored publishes (result, usage event) cost the process and
// its embedded server CPU on the job path; these benchmarks report it per
// message as cpu-µs/op (user + system time of the whole process over b.N),
// with 16 settles at once as the consumer has them.

// cpuTime is the process's user+system CPU time so far (the embedded
// server's included).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

const usageBody = `{"tenant":"acme","job":"1","texts":10,"tokens":400,"padded_tokens":512,"compute_seconds":0.01}`

// BenchmarkRecordUsage stores usage events as the consumer does: one a
// job, confirmed (with its dedupe id) before the job's ACK.
func BenchmarkRecordUsage(b *testing.B) {
	srv := newServer(b, nil)
	pub, err := jetstream.NewPublisher(srv.nc, srv.cfg)
	if err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	b.SetParallelism(benchPar) // 16 goroutines on 2 cores
	b.ResetTimer()
	cpu := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := seq.Add(1)
			e := schema.UsageEvent{Tenant: "acme", Job: fmt.Sprint(n), Delivered: 1, Texts: 10, Tokens: 400, PaddedTokens: 512, ComputeSeconds: 0.01}
			if _, err := pub.RecordUsage(context.Background(), fmt.Sprintf("u1-key-%d", n), e); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
}

// BenchmarkStoreConfirmed compares the two ways of waiting for a stream's
// acknowledgement of each message: a request a message (js.PublishMsg,
// what the publisher did) and the async publisher's one reply
// subscription with a wait for each future (what it does).
func BenchmarkStoreConfirmed(b *testing.B) {
	for _, mode := range []string{"request", "async"} {
		b.Run(mode, func(b *testing.B) {
			srv := newServer(b, nil)
			var seq atomic.Int64
			b.SetParallelism(benchPar)
			b.ResetTimer()
			cpu := cpuTime()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					m := &nats.Msg{Subject: "embed.usage.acme", Data: []byte(usageBody)}
					id := natsjs.WithMsgID(fmt.Sprint(seq.Add(1)))
					var err error
					if mode == "request" {
						_, err = srv.js.PublishMsg(context.Background(), m, id)
					} else {
						var f natsjs.PubAckFuture
						if f, err = srv.js.PublishMsgAsync(m, id); err == nil {
							select {
							case <-f.Ok():
							case err = <-f.Err():
							}
						}
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// BenchmarkStoreNoAck is the floor: the messages stored with no
// acknowledgement asked for.
func BenchmarkStoreNoAck(b *testing.B) {
	srv := newServer(b, nil)
	b.ResetTimer()
	cpu := cpuTime()
	for i := range b.N {
		m := &nats.Msg{Subject: "embed.usage.acme", Data: []byte(usageBody), Header: nats.Header{"Nats-Msg-Id": []string{fmt.Sprint(i)}}}
		if err := srv.nc.PublishMsg(m); err != nil {
			b.Fatal(err)
		}
	}
	for {
		s, err := srv.js.Stream(context.Background(), schema.StreamUsage)
		if err != nil {
			b.Fatal(err)
		}
		if s.CachedInfo().State.Msgs >= uint64(b.N) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
}

// benchPar is the settles at once per core.
var benchPar = 8
