package engine

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jetembed/jetembed/schema"
)

// class is a scheduling class. Interactive work goes first; bulk work is
// capped by the chunk latency budget so an interactive text waits at most
// about one chunk, and ages ahead of interactive work when it made no
// progress for [Config.Aging].
type class uint8

const (
	bulk class = iota
	interactive
	nClasses
)

type interactiveKey struct{}

// WithInteractive returns a context under which [Engine.Embed] schedules
// its texts in the interactive class: ahead of bulk work, under their own
// admission budget ([Config.InteractiveTokens]), so a bulk backlog never
// makes an interactive call wait behind it or fail overloaded.
func WithInteractive(ctx context.Context) context.Context {
	return context.WithValue(ctx, interactiveKey{}, true)
}

// IsInteractive reports whether ctx came from [WithInteractive], for
// embedders that wrap or stand in for the engine.
func IsInteractive(ctx context.Context) bool {
	v, _ := ctx.Value(interactiveKey{}).(bool)
	return v
}

func classOf(ctx context.Context) class {
	if IsInteractive(ctx) {
		return interactive
	}
	return bulk
}

// call is one Embed call as the scheduler sees it.
type call struct {
	ctx   context.Context
	class class
	toks  []tokenized
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
}

// chunkDone reports one chunk to one of the calls it held.
type chunkDone struct {
	session    int
	batch, seq int
	items      []int // the call's items in the chunk
	rows       []int // their rows in the chunk's output
	real       int
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
}

// minGain is how much a row must lower the modelled cost per real token
// to join a chunk whose workspace would exceed bigChunk bytes: 1%. Long
// texts, whose run time dwarfs a run's fixed cost, then run alone
// (batching them buys nothing and multiplies the workspace); small chunks
// grow while the cost per token does not rise.
const (
	minGain  = 0.99
	bigChunk = 256 << 20
)

// gain is the factor the cost per real token must fall by for a rows x seq
// chunk.
func (s *sched) gain(rows, seq int) float64 {
	if s.cost.bytes(rows, seq) > bigChunk {
		return minGain
	}
	return 1
}

// window bounds how many of a class's oldest texts a chunk is chosen
// from, so forming a chunk stays cheap under a deep backlog.
const window = 512

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
	return s
}

// pad is the padded length of a chunk whose longest text has n tokens.
func (s *sched) pad(n int) int {
	if s.tiers == nil {
		return n
	}
	i, _ := slices.BinarySearch(s.tiers, n)
	if i == len(s.tiers) {
		return n
	}
	return s.tiers[i]
}

// tier rounds n up to a configured tier (n beyond the last).
func (s *sched) tier(n int) int {
	i, _ := slices.BinarySearch(s.allTiers, n)
	if i == len(s.allTiers) {
		return n
	}
	return s.allTiers[i]
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

// form takes the next chunk of class cl off the queue. Its anchor is the
// class's oldest text, so calls finish in arrival order; it grows with the
// texts nearest in length (in a length-sorted window of the oldest texts)
// while the modelled cost per real token does not rise and the chunk
// stays within the batch, token, memory and (bulk) latency budgets. On a
// CPU, where a run's fixed cost is small, that is often batch 1 for long
// texts and larger batches of similar short ones.
func (s *sched) form(cl class) *work {
	q := s.queue[cl]
	win := q[:min(len(q), s.window)]
	order := s.scratch[:0]
	for i := range win {
		order = append(order, i)
	}
	// Longest first; ties oldest first.
	slices.SortStableFunc(order, func(a, b int) int { return win[b].n - win[a].n })
	anchor := slices.Index(order, 0)
	lo, hi := anchor, anchor
	seq := s.pad(win[0].n)
	real := win[0].n
	if s.refused(seq) {
		// Refused alone: no other text shares the refusal.
		w := &work{seq: seq, cl: cl, err: schema.Errorf(schema.CodeShapeNotWarmed, "chunk 1x%d is above the warmed ceiling", seq)}
		s.take(cl, order[anchor:anchor+1], w)
		s.scratch = order
		return w
	}
	for {
		rows := hi - lo + 1
		cur := s.cost.seconds(rows, seq) / float64(real)
		bestSide, bestScore, bestSeq := 0, cur, seq
		if hi+1 < len(order) {
			n := win[order[hi+1]].n
			if sc := s.cost.seconds(rows+1, seq) / float64(real+n); sc <= bestScore*s.gain(rows+1, seq) && s.fits(cl, rows+1, seq) {
				bestSide, bestScore = 1, sc
			}
		}
		// A longer text whose padding the guard refuses never joins.
		if lo > 0 && !s.refused(s.pad(win[order[lo-1]].n)) {
			n := win[order[lo-1]].n
			sq := s.pad(n)
			if sc := s.cost.seconds(rows+1, sq) / float64(real+n); sc < min(bestScore, cur*s.gain(rows+1, sq)) && s.fits(cl, rows+1, sq) {
				bestSide, bestScore, bestSeq = -1, sc, sq
			}
		}
		switch bestSide {
		case 1:
			hi++
			real += win[order[hi]].n
		case -1:
			lo--
			real += win[order[lo]].n
			seq = bestSeq
		default:
			w := &work{seq: seq, cl: cl}
			s.take(cl, order[lo:hi+1], w)
			s.scratch = order
			return w
		}
	}
}

// fits reports whether a rows x seq chunk of class cl stays within the
// budgets. One text always fits: New cut MaxTokens to what the memory
// budget holds.
func (s *sched) fits(cl class, rows, seq int) bool {
	switch {
	case rows > s.maxBatch || rows*seq > s.maxToks:
		return false
	case s.memory > 0 && s.cost.bytes(rows, seq) > float64(s.memory):
		return false
	case cl == bulk && s.maxCost > 0 && s.cost.seconds(rows, seq) > s.maxCost:
		return false
	}
	return true
}

// take moves the window entries at idx (longest first) into w.rows and
// deletes them from the queue, keeping the others in arrival order.
func (s *sched) take(cl class, idx []int, w *work) {
	q := s.queue[cl]
	if cap(s.selected) < len(q) {
		s.selected = make([]bool, len(q))
	}
	sel := s.selected[:len(q)]
	for _, i := range idx {
		w.rows = append(w.rows, q[i])
		sel[i] = true
	}
	k := 0
	for i, e := range q {
		if !sel[i] {
			q[k] = e
			k++
		}
		sel[i] = false
	}
	clear(q[k:])
	s.queue[cl] = q[:k]
	if cl == bulk {
		s.bulkSince = s.now()
	}
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
		e.c.done <- cd
	}
}
