//go:build cgo

package consumer_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/fakes"
	"github.com/jetembed/jetembed/engine/ort/enginetest"
	"github.com/jetembed/jetembed/internal/testkit"
	"github.com/jetembed/jetembed/schema"
)

// gatedRunner holds the session's first run until open is closed, and
// says how many texts that run holds: the other calls' texts meanwhile
// wait in the engine's queue, all of them, before any chunk is formed
// from it.
type gatedRunner struct {
	engine.Runner
	open  chan struct{}
	first chan int // receives the first run's batch, once
	once  sync.Once
}

func (g *gatedRunner) Run(ctx context.Context, in engine.RunInput) (engine.RunOutput, error) {
	g.once.Do(func() {
		g.first <- in.Batch
		<-g.open
	})
	return g.Runner.Run(ctx, in)
}

type ackMsg struct{ done chan string }

func (m ackMsg) Ack() error                       { m.done <- "ack"; return nil }
func (m ackMsg) Nak() error                       { m.done <- "nak"; return nil }
func (m ackMsg) NakWithDelay(time.Duration) error { m.done <- "nak"; return nil }
func (m ackMsg) Term() error                      { m.done <- "term"; return nil }
func (ackMsg) InProgress() error                  { return nil }

// storedJob is a stored delivery of j on subject, encoded enc, as a
// fetch loop would hand it over; its ackMsg says how it was settled.
func storedJob(t *testing.T, subject string, j *schema.Job, enc schema.Encoding) (*consumer.Stored, ackMsg) {
	t.Helper()
	data, err := schema.EncodeJob(j, enc)
	if err != nil {
		t.Fatal(err)
	}
	m := ackMsg{done: make(chan string, 1)}
	return &consumer.Stored{Msg: m, NumDelivered: 1, Arrival: consumer.Arrival{Data: data, Subject: subject,
		Header: map[string][]string{schema.HeaderContentType: {enc.ContentType()}}}}, m
}

type results struct {
	mu   sync.Mutex
	data map[string][]byte
}

func (r *results) PublishResult(_ context.Context, _, _ string, h map[string][]string, data []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.data[h[schema.HeaderJobID][0]] = slices.Clone(data)
	return nil
}

func (r *results) PublishDLQ(context.Context, consumer.DeadLetter, map[string][]string, []byte) error {
	return nil
}

// TestRealEngine runs jobs of both encodings and all outputs through the
// loop and the tiny model: every vector equals what the engine gives for
// the job's texts alone, although the engine packed the jobs together.
func TestRealEngine(t *testing.T) {
	gate := &gatedRunner{open: make(chan struct{}), first: make(chan int, 1)}
	// The tiny hidden-state model on one CPU session, with chunks small
	// enough that a job spans several.
	e := enginetest.OpenWith(t, engine.Config{Sessions: 1, MaxTokens: 24, MaxBatch: 4, MaxBatchTokens: 96}, func(r engine.Runner) engine.Runner {
		gate.Runner = r
		return gate
	})
	emb := &fakes.Embedder{Embedder: e}
	pub := &results{data: map[string][]byte{}}
	c, err := consumer.New(consumer.Config{}, emb, pub)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Run(context.Background()) }()
	t.Cleanup(func() { _ = c.Drain(context.Background()) })

	words := strings.Fields("the quick brown fox jumps over the lazy dog while embeddings pack tightly into padded chunks")
	outputs := [][]schema.Output{nil, {schema.OutputSparse}, {schema.OutputColBERT}, {schema.OutputDense, schema.OutputSparse, schema.OutputColBERT}}
	var jobs []*schema.Job
	var encs []schema.Encoding
	var msgs []ackMsg
	for k := range 6 {
		var texts []string
		for i := range 1 + k%3 {
			texts = append(texts, strings.Join(words[:1+(k*5+i*7)%len(words)], " "))
		}
		if k == 5 {
			texts = append(texts, strings.Repeat("long text ", 20)) // over 24 tokens: cut and flagged
		}
		j := schema.NewJob(fmt.Sprint("job-", k), texts...)
		j.Outputs, j.Reply = outputs[k%len(outputs)], "embed.results.real.x"
		enc := schema.Encoding(k % 2)
		d, m := storedJob(t, "embed.jobs.real", j, enc)
		if err := c.Submit(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		jobs, encs, msgs = append(jobs, j), append(encs, enc), append(msgs, m)
	}
	// The session holds the first chunk until every other text waits in
	// the engine's queue: then the chunks are formed from all the jobs.
	total := 0
	for _, j := range jobs {
		total += len(j.Texts)
	}
	running := <-gate.first
	testkit.CheckFor(t, 10*time.Second, time.Millisecond, func() error {
		if q := e.Stats().Queued; q+running != total {
			return fmt.Errorf("%d texts queued and %d running, want all %d in the engine", q, running, total)
		}
		return nil
	})
	close(gate.open)
	for k, m := range msgs {
		if got := <-m.done; got != "ack" {
			t.Fatalf("job %d: %s", k, got)
		}
	}

	reports := emb.Reports()
	// One Embed call per job; the engine's queue packs their texts: a
	// chunk that held texts of several calls reports fewer texts than
	// rows to each of them.
	if len(reports) != len(jobs) {
		t.Fatalf("%d Embed calls, want one per job", len(reports))
	}
	manyJobs, spans := false, false
	for _, rep := range reports {
		spans = spans || len(rep.Chunks) > 1
		for _, ch := range rep.Chunks {
			manyJobs = manyJobs || ch.Texts < ch.Batch
		}
	}
	if !manyJobs || !spans {
		t.Errorf("reports %+v: want a chunk with texts of several jobs (%v) and a job over several chunks (%v)", reports, manyJobs, spans)
	}

	for k, j := range jobs {
		pub.mu.Lock()
		data := pub.data[j.ID]
		pub.mu.Unlock()
		res, err := schema.DecodeResult(data, encs[k])
		if err != nil {
			t.Fatal(err)
		}
		var out engine.Output
		for _, o := range j.Outputs {
			out |= map[schema.Output]engine.Output{schema.OutputDense: engine.Dense, schema.OutputSparse: engine.Sparse, schema.OutputColBERT: engine.ColBERT}[o]
		}
		if out == 0 {
			out = engine.Dense
		}
		texts := make([]engine.Text, len(j.Texts))
		for i, s := range j.Texts {
			texts[i] = engine.Text{Text: s, Outputs: out, Truncate: true}
		}
		alone, rep, err := e.Embed(context.Background(), texts, engine.Call{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Model != e.ModelID() || len(res.Items) != len(texts) {
			t.Fatalf("job %d: model %q, %d items", k, res.Model, len(res.Items))
		}
		if res.Usage.Tokens != rep.Tokens {
			t.Errorf("job %d: usage tokens %d, want %d", k, res.Usage.Tokens, rep.Tokens)
		}
		for i, it := range res.Items {
			w := alone[i]
			if it.Error != nil || it.Tokens != w.Tokens || it.Truncated != w.Truncated {
				t.Errorf("job %d item %d: error %v, tokens %d/%d, truncated %v/%v", k, i, it.Error, it.Tokens, w.Tokens, it.Truncated, w.Truncated)
			}
			closeTo(t, fmt.Sprintf("job %d item %d dense", k, i), it.Dense, w.Dense)
			if out.Has(engine.Sparse) {
				if it.Sparse == nil || !slices.Equal(it.Sparse.IDs, w.SparseIDs) {
					t.Errorf("job %d item %d: sparse ids differ", k, i)
				} else {
					closeTo(t, fmt.Sprintf("job %d item %d sparse", k, i), it.Sparse.Weights, w.SparseWeights)
				}
			}
			var flat []float32
			for _, row := range it.ColBERT {
				flat = append(flat, row...)
			}
			closeTo(t, fmt.Sprintf("job %d item %d colbert", k, i), flat, w.ColBERT)
		}
		if k == 5 && !res.Items[len(res.Items)-1].Truncated {
			t.Error("the long text was not flagged truncated")
		}
	}
}

// closeTo compares vectors computed in differently padded chunks.
func closeTo(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d values, want %d", what, len(got), len(want))
		return
	}
	for i := range got {
		if math.Abs(float64(got[i]-want[i])) > 1e-4 {
			t.Errorf("%s[%d] = %g, want %g", what, i, got[i], want[i])
			return
		}
	}
}
