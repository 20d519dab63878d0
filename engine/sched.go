package engine

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jetembed/jetembed/schema"
)

// call is one Embed call as the scheduler sees it.
type call struct {
	ctx    context.Context
	class  class
	tenant string // whose call: chunks are anchored on tenants in turn
	toks   []tokenized
	// done receives one chunkDone per chunk holding some of the call's
	// texts; it has room for every queued text, so a session never blocks
	// on a caller that gave up.
	done chan chunkDone
}

// entry is one queued text.
type entry struct {
	c    *call
	item int
	n    int // tokens
}

// work is what a session pulls: a chunk of queued texts, or a directed
// task (warm-up, probe) when task is set.
type work struct {
	rows []entry
	seq  int
	cl   class
	err  *schema.Error // refused before running (JIT guard)
	task *task
	took time.Duration // the session run's time, once it ran
}

// chunkDone reports one chunk to one of the calls it held.
type chunkDone struct {
	session    int
	batch, seq int
	items      []int // the call's items in the chunk
	rows       []int // their rows in the chunk's output
	real       int
	took       time.Duration // the call's share of the run's time
	out        RunOutput
	err        *schema.Error
}

// sched is the one queue of every in-flight Embed call's texts. Sessions
// pull from it when free ([sched.next]); the chunk is formed at that
// moment from what is queued, so no session idles while work waits.
type sched struct {
	mu      sync.Mutex
	cond    *sync.Cond
	queue   [nClasses][]entry
	direct  []task
	closed  bool
	running int
	// bulkSince is when bulk work last made progress (a bulk chunk
	// started or ended) or began waiting; aging compares it with now.
	// While a bulk chunk runs, bulk work is not starved.
	bulkSince   time.Time
	bulkRunning int

	cost     *costModel
	maxBatch int
	maxToks  int
	maxCost  float64 // bulk chunk latency cap, seconds; 0 none
	memory   int64   // workspace budget, bytes; 0 none
	tiers    []int   // nil pads to the chunk's own longest text
	allTiers []int   // the configured tiers, for shape records
	aging    time.Duration
	refused  func(seq int) bool
	now      func() time.Time
	learn    bool // refit the run-time model from runs (tests turn it off)
	window   int
	scratch  []int
	selected []bool
	winBuf   []entry
	idxBuf   []int

	// Tenants take turns at anchoring a chunk, by deficit round robin
	// over real tokens: served is each queued tenant's tokens run (over
	// its weight), queued its texts waiting, per class. A tenant that
	// arrives starts level with the least served one, so it cannot bank
	// credit while it had nothing queued.
	weight func(tenant string) int
	served [nClasses]map[string]float64
	queued [nClasses]map[string]int
}

func newSched(cfg Config, cost *costModel, refused func(int) bool) *sched {
	s := &sched{
		cost: cost, maxBatch: cfg.MaxBatch, maxToks: cfg.MaxBatchTokens,
		maxCost: cfg.MaxChunkLatency.Seconds(), memory: cfg.chunkMemory(),
		aging: cfg.Aging, refused: refused, now: time.Now, window: window, learn: true,
	}
	s.allTiers = cfg.Tiers
	if !cfg.PadExact {
		s.tiers = cfg.Tiers
	}
	s.cond = sync.NewCond(&s.mu)
	s.weight = func(string) int { return 1 }
	for cl := range s.served {
		s.served[cl], s.queued[cl] = map[string]float64{}, map[string]int{}
	}
	return s
}

// joined counts n texts of tenant t queued in class cl. s.mu is held.
func (s *sched) joined(cl class, t string, n int) {
	if _, ok := s.queued[cl][t]; !ok {
		least, any := 0.0, false
		for _, v := range s.served[cl] {
			if !any || v < least {
				least, any = v, true
			}
		}
		s.served[cl][t] = least
	}
	s.queued[cl][t] += n
}

// left uncounts one text of tenant t that left class cl's queue, having
// run tokens real tokens (0 when it was removed unrun). s.mu is held.
func (s *sched) left(cl class, t string, tokens int) {
	if tokens > 0 {
		s.served[cl][t] += float64(tokens) / float64(max(s.weight(t), 1))
	}
	if s.queued[cl][t]--; s.queued[cl][t] <= 0 {
		delete(s.queued[cl], t)
		delete(s.served[cl], t)
	}
}

// anchorIndex is the queue index of class cl's next anchor: the oldest
// text of the least served tenant (the oldest text of all when one
// tenant waits). s.mu is held.
func (s *sched) anchorIndex(cl class) int {
	if len(s.queued[cl]) <= 1 {
		return 0
	}
	least := 0.0
	first := true
	for _, v := range s.served[cl] {
		if first || v < least {
			least, first = v, false
		}
	}
	for i, e := range s.queue[cl] {
		if s.served[cl][e.c.tenant] <= least {
			return i
		}
	}
	return 0
}

// enqueue queues a call's texts (items with n > 0 tokens).
func (s *sched) enqueue(c *call, items, lengths []int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	q := &s.queue[c.class]
	if c.class == bulk && len(*q) == 0 {
		s.bulkSince = s.now()
	}
	for k, it := range items {
		*q = append(*q, entry{c: c, item: it, n: lengths[k]})
	}
	if len(items) > 0 {
		s.joined(c.class, c.tenant, len(items))
	}
	s.cond.Broadcast()
	return nil
}

// remove takes a call's queued texts out (the caller gave up) and returns
// how many it removed.
func (s *sched) remove(c *call) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := &s.queue[c.class]
	before := len(*q)
	*q = slices.DeleteFunc(*q, func(e entry) bool { return e.c == c })
	for range before - len(*q) {
		s.left(c.class, c.tenant, 0)
	}
	return before - len(*q)
}

// next blocks until there is work for session idx and returns it, or nil
// once the scheduler is closed.
func (s *sched) next(idx int) *work {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.closed {
			return nil
		}
		for i, t := range s.direct {
			if t.want < 0 || t.want == idx {
				s.direct = slices.Delete(s.direct, i, i+1)
				s.running++
				return &work{task: &t}
			}
		}
		if cl, ok := s.pick(); ok {
			s.running++
			if cl == bulk {
				s.bulkRunning++
			}
			return s.form(cl)
		}
		s.cond.Wait()
	}
}

// finished tells the scheduler a session is done with w.
func (s *sched) finished(w *work) {
	s.mu.Lock()
	s.running--
	if w.task == nil && w.cl == bulk {
		s.bulkRunning--
		s.bulkSince = s.now()
	}
	s.mu.Unlock()
}

// pick chooses the class the next chunk comes from: interactive, unless
// bulk work has waited without progress for the aging time.
func (s *sched) pick() (class, bool) {
	hasI, hasB := len(s.queue[interactive]) > 0, len(s.queue[bulk]) > 0
	switch {
	case hasI && hasB && s.bulkRunning == 0 && s.now().Sub(s.bulkSince) >= s.aging:
		return bulk, true
	case hasI:
		return interactive, true
	case hasB:
		return bulk, true
	}
	return 0, false
}

// observe feeds a run's measured time to the cost model.
func (s *sched) observe(batch, seq int, d time.Duration) {
	s.mu.Lock()
	if s.learn {
		s.cost.observe(batch, seq, d.Seconds())
	}
	s.mu.Unlock()
}

// seconds is the modelled run time of a shape, under the lock.
func (s *sched) seconds(batch, seq int) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cost.seconds(batch, seq)
}

// dispatch queues a directed task for session want (any when < 0).
func (s *sched) dispatch(t task) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.direct = append(s.direct, t)
	s.cond.Broadcast()
	return nil
}

// failDirected answers the tasks directed at a session that is down.
func (s *sched) failDirected(idx int, err error) {
	s.mu.Lock()
	var drop []task
	s.direct = slices.DeleteFunc(s.direct, func(t task) bool {
		if t.want == idx {
			drop = append(drop, t)
			return true
		}
		return false
	})
	s.mu.Unlock()
	for _, t := range drop {
		t.done <- result{session: idx, err: err}
	}
}

// busy reports queued texts and sessions at work.
func (s *sched) busy() (queued, running int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue[bulk]) + len(s.queue[interactive]), s.running
}

// close stops the scheduler: queued texts and tasks fail with ErrClosed
// and [sched.next] returns nil.
func (s *sched) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	var rows []entry
	for cl := range s.queue {
		rows = append(rows, s.queue[cl]...)
		s.queue[cl] = nil
	}
	direct := s.direct
	s.direct = nil
	s.cond.Broadcast()
	s.mu.Unlock()
	if len(rows) > 0 {
		(&work{rows: rows}).deliver(-1, RunOutput{}, runError(ErrClosed))
	}
	for _, t := range direct {
		t.done <- result{session: -1, err: ErrClosed}
	}
}

// deliver sends the chunk's outcome to each call it held.
func (w *work) deliver(session int, out RunOutput, err *schema.Error) {
	done := make([]bool, len(w.rows))
	for i, e := range w.rows {
		if done[i] {
			continue
		}
		cd := chunkDone{session: session, batch: len(w.rows), seq: w.seq, out: out, err: err}
		for j := i; j < len(w.rows); j++ {
			if w.rows[j].c == e.c {
				done[j] = true
				cd.items = append(cd.items, w.rows[j].item)
				cd.rows = append(cd.rows, j)
				cd.real += w.rows[j].n
			}
		}
		if w.took > 0 {
			cd.took = w.took * time.Duration(len(cd.items)) / time.Duration(len(w.rows))
		}
		e.c.done <- cd
	}
}
