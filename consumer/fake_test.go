package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/internal/testkit"
	"github.com/jetembed/jetembed/schema"
)

// fakeMsg records what the loop did to a message, in order.
type fakeMsg struct {
	mu      sync.Mutex
	calls   []string // "ack", "nak", "nak:<delay>", "progress", "term"
	delays  []time.Duration
	done    chan struct{} // closed at the first settlement
	ackErr  error
	settled int
}

func newMsg() *fakeMsg { return &fakeMsg{done: make(chan struct{})} }

func (m *fakeMsg) record(call string, settles bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, call)
	if settles {
		m.settled++
		if m.settled == 1 {
			close(m.done)
		}
	}
	return m.ackErr
}

func (m *fakeMsg) Ack() error        { return m.record("ack", true) }
func (m *fakeMsg) Nak() error        { return m.record("nak", true) }
func (m *fakeMsg) Term() error       { return m.record("term", true) }
func (m *fakeMsg) InProgress() error { return m.record("progress", false) }
func (m *fakeMsg) NakWithDelay(d time.Duration) error {
	m.mu.Lock()
	m.delays = append(m.delays, d)
	m.mu.Unlock()
	return m.record("nak+delay", true)
}

// Calls returns the recorded calls.
func (m *fakeMsg) Calls() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.calls)
}

// wait blocks until the message is settled and returns its calls with
// InProgress left out.
func (m *fakeMsg) wait(tb testing.TB) []string {
	tb.Helper()
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
		tb.Fatalf("message never settled; calls %v", m.Calls())
	}
	var out []string
	for _, c := range m.Calls() {
		if c != "progress" {
			out = append(out, c)
		}
	}
	return out
}

type published struct {
	subject, msgID string
	header         map[string][]string
	data           []byte
}

// fakePub records results and dead letters; fail injects publish errors,
// delay stands for the stream's confirmation time.
type fakePub struct {
	mu      sync.Mutex
	results []published
	dlq     []DeadLetter
	// dlqHeaders and dlqData are the headers and body of each dead
	// letter, as dlq.
	dlqHeaders []map[string][]string
	dlqData    [][]byte
	events     []string // "result" and "dlq", in order
	fail       func(subject string) error
	failDLQ    error
	delay      time.Duration
	// maxPayload, when set, is the limit the publisher reports.
	maxPayload int64
}

func (p *fakePub) MaxPayload() int64 { return p.maxPayload }

func (p *fakePub) PublishResult(ctx context.Context, subject, msgID string, header map[string][]string, data []byte) error {
	if p.delay > 0 {
		select {
		case <-time.After(p.delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if p.fail != nil {
		if err := p.fail(subject); err != nil {
			return err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.results = append(p.results, published{subject, msgID, header, slices.Clone(data)})
	p.events = append(p.events, "result")
	return nil
}

func (p *fakePub) PublishDLQ(ctx context.Context, reason DeadLetter, header map[string][]string, data []byte) error {
	if p.failDLQ != nil {
		return p.failDLQ
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dlq = append(p.dlq, reason)
	p.dlqHeaders = append(p.dlqHeaders, header)
	p.dlqData = append(p.dlqData, slices.Clone(data))
	p.events = append(p.events, "dlq")
	return nil
}

func (p *fakePub) Results() []published {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.results)
}

func (p *fakePub) Events() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.events)
}

func (p *fakePub) DLQ() []DeadLetter {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.dlq)
}

// fakeEmb computes vectors from each text alone, so a test knows what any
// text must get whatever it was packed with: see want. refuse fails chosen
// items, callErr whole calls; block holds every call (those blockIf
// chooses, when set) until closed. slots, when set, is the engine's
// budget, one job a slot: a call waits for a free one (or its context's
// end, deadline_exceeded) before it is admitted ([engine.Call.Admitted])
// and recorded, and keeps it until the loop releases it.
type fakeEmb struct {
	mu      sync.Mutex
	calls   [][]engine.Text
	ctxs    []context.Context
	opts    []engine.Call
	slots   chan struct{}
	refuse  func(text string) *schema.Error
	callErr func(texts []engine.Text) error
	block   chan struct{}
	blockIf func(texts []engine.Text) bool
	started chan struct{} // receives once per call, when set
}

func (f *fakeEmb) Embed(ctx context.Context, texts []engine.Text, call engine.Call) ([]engine.Embedding, engine.CallReport, error) {
	if f.callErr != nil {
		if err := f.callErr(texts); err != nil {
			return nil, engine.CallReport{}, err
		}
	}
	release := func() {}
	if f.slots != nil {
		select {
		case f.slots <- struct{}{}:
			release = sync.OnceFunc(func() { <-f.slots })
		case <-ctx.Done():
			return nil, engine.CallReport{}, schema.Errorf(schema.CodeDeadlineExceeded, "waiting for capacity: %v", ctx.Err())
		}
	}
	if call.Admitted != nil {
		call.Admitted(release)
	} else {
		defer release()
	}
	if len(texts) == 0 && call.Hold > 0 {
		return nil, engine.CallReport{}, nil // as the engine: admitted, nothing run
	}
	f.mu.Lock()
	f.calls = append(f.calls, slices.Clone(texts))
	f.ctxs = append(f.ctxs, ctx)
	f.opts = append(f.opts, call)
	f.mu.Unlock()
	if f.started != nil {
		f.started <- struct{}{}
	}
	if f.block != nil && (f.blockIf == nil || f.blockIf(texts)) {
		select {
		case <-f.block:
		case <-ctx.Done():
			return nil, engine.CallReport{}, ctx.Err()
		}
	}
	out := make([]engine.Embedding, len(texts))
	ch := engine.ChunkReport{Batch: len(texts), Texts: len(texts)}
	for i, t := range texts {
		if t.Text == "panic" {
			panic("fake embedder: poison text")
		}
		if f.refuse != nil {
			if err := f.refuse(t.Text); err != nil {
				out[i] = engine.Embedding{Tokens: len(t.Text) + 2, Err: err}
				continue
			}
		}
		out[i] = want(t)
		ch.Seq = max(ch.Seq, out[i].Tokens)
		ch.Items = append(ch.Items, i)
		ch.RealTokens += out[i].Tokens
	}
	ch.PaddedTokens = ch.Batch * ch.Seq
	return out, engine.CallReport{Chunks: []engine.ChunkReport{ch}, Tokens: ch.RealTokens, PaddedTokens: ch.PaddedTokens}, nil
}

func (f *fakeEmb) Calls() [][]engine.Text {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fakeEmb) ModelID() string { return "fake@123456789abc" }
func (f *fakeEmb) MaxTokens() int  { return 0 }

// want is the fake embedding of t: dense (len, first byte), sparse one
// weight per distinct byte, colbert one (byte, 1) row per byte.
func want(t engine.Text) engine.Embedding {
	e := engine.Embedding{Tokens: len(t.Text) + 2}
	if t.Outputs.Has(engine.Dense) {
		e.Dense = []float32{float32(len(t.Text)), float32(t.Text[0])}
	}
	if t.Outputs.Has(engine.Sparse) {
		seen := map[byte]float32{}
		for _, b := range []byte(t.Text) {
			seen[b]++
		}
		for b := range 256 {
			if w, ok := seen[byte(b)]; ok {
				e.SparseIDs = append(e.SparseIDs, uint32(b))
				e.SparseWeights = append(e.SparseWeights, w)
			}
		}
	}
	if t.Outputs.Has(engine.ColBERT) {
		e.ColBERTDim = 2
		for _, b := range []byte(t.Text) {
			e.ColBERT = append(e.ColBERT, float32(b), 1)
		}
	}
	return e
}

// fakeMetrics counts calls as "method outcome code" or "method reason".
type fakeMetrics struct {
	mu sync.Mutex
	n  map[string]int
}

func (m *fakeMetrics) add(key string, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n == nil {
		m.n = map[string]int{}
	}
	m.n[key] += n
}

func (m *fakeMetrics) get(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n[key]
}

func (m *fakeMetrics) String() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return fmt.Sprint(m.n)
}

func (m *fakeMetrics) JobDone(_ context.Context, o schema.Outcome, c schema.Code) {
	m.add(fmt.Sprintf("jobs %s %s", o, c), 1)
}

func (m *fakeMetrics) TextsDone(_ context.Context, o schema.Outcome, c schema.Code, n int) {
	m.add(fmt.Sprintf("texts %s %s", o, c), n)
}
func (m *fakeMetrics) Tokens(_ context.Context, t, p int) { m.add("tokens", t); m.add("padded", p) }
func (m *fakeMetrics) Chunk(context.Context, int, int)    { m.add("chunks", 1) }
func (m *fakeMetrics) BatchTexts(_ context.Context, n int) {
	m.add("batches", 1)
	m.add("batch texts", n)
}
func (m *fakeMetrics) QueueWait(_ context.Context, d time.Duration) {
	m.add("queue waits", 1)
	m.add("queue wait s", int(d.Seconds()))
}
func (m *fakeMetrics) Publish(context.Context, time.Duration) { m.add("publishes", 1) }
func (m *fakeMetrics) Nak(_ context.Context, r string)        { m.add("nak "+r, 1) }
func (m *fakeMetrics) Term(_ context.Context, r string)       { m.add("term "+r, 1) }

// rig is a running consumer with fakes around it.
type rig struct {
	c   *Loop
	emb *fakeEmb
	pub *fakePub
	met *fakeMetrics
	log *testkit.Buffer
	run chan error
}

// newRig starts a consumer; the test's cleanup drains it. Jitter is off so
// NAK delays are exact.
func newRig(tb testing.TB, cfg Config, emb *fakeEmb, pub *fakePub) *rig {
	tb.Helper()
	if emb == nil {
		emb = &fakeEmb{}
	}
	r := newRigWith(tb, cfg, emb, pub)
	r.emb = emb
	return r
}

// newRigWith is newRig around any Embedder.
func newRigWith(tb testing.TB, cfg Config, emb engine.Embedder, pub *fakePub) *rig {
	tb.Helper()
	if pub == nil {
		pub = &fakePub{}
	}
	r := &rig{pub: pub, met: &fakeMetrics{}, log: &testkit.Buffer{}, run: make(chan error, 1)}
	if cfg.NakBackoff == (Backoff{}) {
		cfg.NakBackoff = Backoff{Base: 100 * time.Millisecond, Max: time.Second, Jitter: -1}
	}
	if cfg.Replies.Allow == nil && cfg.Replies.Deny == nil {
		// The tests name short reply subjects; the policy's own checks
		// (and its deny list) still apply. A test that wants the default
		// policy passes ReplyPolicy{}.WithDefaults().
		cfg.Replies.Allow = []string{">"}
	}
	cfg.Metrics = r.met
	cfg.Logger = slog.New(slog.NewJSONHandler(r.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := New(cfg, emb, pub)
	if err != nil {
		tb.Fatal(err)
	}
	r.c = c
	go func() { r.run <- c.Run(context.Background()) }()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.Drain(ctx); err != nil {
			tb.Errorf("drain: %v", err)
		}
		if err := <-r.run; err != nil {
			tb.Errorf("run: %v", err)
		}
	})
	return r
}

// testTenant is the tenant of the rig's deliveries: they arrive on
// embed.jobs.<testTenant>.
const testTenant = "t"

// delivery encodes j as a delivery with a recording message.
func delivery(tb testing.TB, j *schema.Job, enc schema.Encoding, n uint64) (*Stored, *fakeMsg) {
	tb.Helper()
	data, err := schema.EncodeJob(j, enc)
	if err != nil {
		tb.Fatal(err)
	}
	m := newMsg()
	return &Stored{
		Arrival: Arrival{
			Data:     data,
			Subject:  "embed.jobs." + testTenant,
			Header:   map[string][]string{schema.HeaderContentType: {enc.ContentType()}, schema.HeaderMsgID: {j.ID}},
			Received: time.Now(),
		},
		Msg:          m,
		NumDelivered: n,
	}, m
}

// asRequest is the request-reply twin of the stored delivery d, answered
// through respond.
func asRequest(d *Stored, respond func(map[string][]string, []byte) error) *Request {
	return &Request{Arrival: d.Arrival, Reply: d.Reply, Respond: respond, witness: d.Msg}
}

// submit delivers j (first delivery) and waits for its settlement.
func (r *rig) submit(tb testing.TB, j *schema.Job, enc schema.Encoding) []string {
	tb.Helper()
	d, m := delivery(tb, j, enc, 1)
	if err := r.c.Submit(context.Background(), d); err != nil {
		tb.Fatal(err)
	}
	return m.wait(tb)
}

// resultFor decodes the one result published for job id.
func (r *rig) resultFor(tb testing.TB, id string) (*schema.Result, published) {
	tb.Helper()
	var found []published
	for _, p := range r.pub.Results() {
		if h := p.header[schema.HeaderJobID]; len(h) > 0 && h[0] == id {
			if want := schema.ResultMsgID(testTenant, p.subject, id); p.msgID != want {
				tb.Errorf("job %s: result msg id %q, want %q", id, p.msgID, want)
			}
			found = append(found, p)
		}
	}
	if len(found) != 1 {
		tb.Fatalf("job %s: %d results published, want 1", id, len(found))
	}
	res, err := schema.DecodeResult(found[0].data, schema.EncodingFor(found[0].header[schema.HeaderContentType][0]))
	if err != nil {
		tb.Fatal(err)
	}
	return res, found[0]
}

var errInjected = errors.New("injected failure")

// waitingCount is how many deliveries wait for room in the engine.
func (c *Loop) waitingCount() int { return c.Stats().Waiting }
