package fleet

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/jetembed/jetembed/consumer"
)

// fate is what happened to a member by the end of the run.
type fate int

const (
	live    fate = iota
	killed       // its connection closed without a drain (SIGKILL)
	stopped      // Worker.Stop: in-flight jobs finished, buffered ones NAKed
)

// delivery is one delivery of a job to a member, and its ack.
type delivery struct {
	member int
	// num is the server's delivery count: above 1 on a job's first
	// recorded delivery, an earlier one sat in a fetch buffer unseen.
	num      uint64
	received time.Time
	acked    time.Time // zero when the ack did not reach the server
}

// ledger records every delivery and ack of the run, by the job's subject
// (one a job: embed.jobs.<run>.<id>). The members' sinks
// write it from many goroutines.
type ledger struct {
	mu    sync.Mutex
	jobs  map[string][]delivery
	fates map[int]fate
	first map[int]time.Time // a member's first delivery
}

func newLedger() *ledger {
	return &ledger{jobs: map[string][]delivery{}, fates: map[int]fate{}, first: map[int]time.Time{}}
}

func (l *ledger) delivered(id string, member int, num uint64, at time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.jobs[id] = append(l.jobs[id], delivery{member: member, num: num, received: at})
	if _, ok := l.first[member]; !ok {
		l.first[member] = at
	}
	return len(l.jobs[id]) - 1
}

func (l *ledger) acked(id string, i int, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.jobs[id][i].acked = at
}

func (l *ledger) setFate(member int, f fate) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fates[member] = f
}

func (l *ledger) firstDelivery(member int) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.first[member]
	return at, ok
}

// snapshot copies the deliveries and fates, for the accounting.
func (l *ledger) snapshot() (map[string][]delivery, map[int]fate) {
	l.mu.Lock()
	defer l.mu.Unlock()
	jobs := make(map[string][]delivery, len(l.jobs))
	for id, ds := range l.jobs {
		jobs[id] = append([]delivery(nil), ds...)
	}
	fates := make(map[int]fate, len(l.fates))
	for m, f := range l.fates {
		fates[m] = f
	}
	return jobs, fates
}

// ackedIn counts each member's acks within [from, to).
func (l *ledger) ackedIn(from, to time.Time) map[int]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int]int{}
	for _, ds := range l.jobs {
		for _, d := range ds {
			if !d.acked.IsZero() && !d.acked.Before(from) && d.acked.Before(to) {
				out[d.member]++
			}
		}
	}
	return out
}

// ackLatencies are the delivery-to-ack times of every acked delivery,
// sorted.
func (l *ledger) ackLatencies() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []time.Duration
	for _, ds := range l.jobs {
		for _, d := range ds {
			if !d.acked.IsZero() {
				out = append(out, d.acked.Sub(d.received))
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// tally is the run's accounting, from what was sent, what the results
// stream holds and what the members saw.
type tally struct {
	Sent int
	// Stored counts sent jobs with a stored result; Lost those without;
	// StoredDuplicates the extra results of jobs stored more than once
	// (the results stream's dedupe window should make it 0).
	Stored, Lost, StoredDuplicates int
	// Strays are stored results of no sent job.
	Strays int
	// Redelivered counts jobs delivered more than once, by what happened
	// to the member of each earlier delivery: killed (the only source of
	// duplicated work), stopped (NAKed back unstarted or unfinished), or
	// live (an AckWait expiry or a NAK on a healthy member: unexplained).
	Redelivered                       int
	FromKilled, FromStopped, FromLive int
	// FromBuffer counts jobs redelivered whose earlier deliveries never
	// left a member's fetch buffer (the server counted them; no consumer
	// saw them): NAKed by a stop, or lost with a killed connection.
	FromBuffer int
	// DoubleAcked counts jobs acknowledged by two deliveries: work done
	// and settled twice.
	DoubleAcked int
}

// account computes the tally. stored counts the results stream's messages
// by Nats-Msg-Id; resultID maps a job id to its result's msg id.
func account(sent []string, stored map[string]int, resultID func(job string) string,
	jobs map[string][]delivery, fates map[int]fate) tally {
	t := tally{Sent: len(sent)}
	want := make(map[string]bool, len(sent))
	for _, id := range sent {
		rid := resultID(id)
		want[rid] = true
		switch n := stored[rid]; {
		case n == 0:
			t.Lost++
		default:
			t.Stored++
			t.StoredDuplicates += n - 1
		}
	}
	for rid := range stored {
		if !want[rid] {
			t.Strays++
		}
	}
	for _, ds := range jobs {
		acks := 0
		for _, d := range ds {
			if !d.acked.IsZero() {
				acks++
			}
		}
		if acks > 1 {
			t.DoubleAcked++
		}
		if len(ds) < 2 {
			if len(ds) == 1 && ds[0].num > 1 {
				t.Redelivered++
				t.FromBuffer++
			}
			continue
		}
		t.Redelivered++
		// The worst fate among the earlier deliveries explains it.
		worst := stopped
		for _, d := range ds[:len(ds)-1] {
			switch fates[d.member] {
			case killed:
				if worst != live {
					worst = killed
				}
			case live:
				worst = live
			}
		}
		switch worst {
		case killed:
			t.FromKilled++
		case stopped:
			t.FromStopped++
		default:
			t.FromLive++
		}
	}
	return t
}

// tracedSink records deliveries and acks in the ledger on their way to
// the member's consumer.
type tracedSink struct {
	c      *consumer.Loop
	l      *ledger
	member int
}

func (s tracedSink) Submit(ctx context.Context, d consumer.Delivery) error {
	// Every job has a subject of its own (the client's per-job subject).
	id := d.Subject
	if id != "" && d.Msg != nil {
		i := s.l.delivered(id, s.member, d.NumDelivered, d.Received)
		d.Msg = ackedMsg{Message: d.Msg, done: func() { s.l.acked(id, i, time.Now()) }}
	}
	return s.c.Submit(ctx, d)
}

// Stats lets the pull loop size its prefetch from the consumer, as it
// does without the tracing.
func (s tracedSink) Stats() consumer.Stats { return s.c.Stats() }

type ackedMsg struct {
	consumer.Message
	done func()
}

func (m ackedMsg) Ack() error {
	err := m.Message.Ack()
	if err == nil {
		m.done()
	}
	return err
}
