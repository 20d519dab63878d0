package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/fakes"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

var e2eTexts = []string{"the quick brown fox", "héllo wörld, 你好世界", "a", strings.Repeat("lorem ipsum dolor ", 12)}

// collect reads run's results until every id has one, or fails after 30s.
func collect(t *testing.T, c *client.Client, run string, ids []string) map[string]*schema.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	got := make(map[string]*schema.Result)
	for sr, err := range c.Results(ctx, run) {
		if err != nil {
			t.Fatalf("results of %s: %v (have %d of %d)", run, err, len(got), len(ids))
		}
		if _, dup := got[sr.ID]; dup {
			t.Errorf("result of job %s stored twice", sr.ID)
		}
		got[sr.ID] = sr.Result
		if !want[sr.ID] {
			t.Errorf("unexpected result for job %q", sr.ID)
		}
		if len(got) == len(ids) {
			break
		}
	}
	return got
}

func engineText(texts []string, outs []schema.Output) []engine.Text {
	j := &schema.Job{Outputs: outs}
	var o engine.Output
	for k, x := range map[schema.Output]engine.Output{schema.OutputDense: engine.Dense, schema.OutputSparse: engine.Sparse, schema.OutputColBERT: engine.ColBERT} {
		if j.Wants(k) {
			o |= x
		}
	}
	out := make([]engine.Text, len(texts))
	for i, s := range texts {
		out[i] = engine.Text{Text: s, Outputs: o, Truncate: true}
	}
	return out
}

func closeVec(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(float64(a[i]-b[i])) > 1e-4 {
			return false
		}
	}
	return true
}

// checkResult compares a result with the engine's own vectors for texts.
func checkResult(t *testing.T, e *engine.Engine, res *schema.Result, texts []string, outs []schema.Output) {
	t.Helper()
	if res.Error != nil {
		t.Fatalf("job %s: %v", res.ID, res.Error)
	}
	if res.Model != e.ModelID() {
		t.Errorf("job %s: model %q, want %q", res.ID, res.Model, e.ModelID())
	}
	want, _, err := e.Embed(context.Background(), engineText(texts, outs), engine.Call{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Items) != len(texts) {
		t.Fatalf("job %s: %d items for %d texts", res.ID, len(res.Items), len(texts))
	}
	j := &schema.Job{Outputs: outs}
	for i, it := range res.Items {
		w := want[i]
		if it.Error != nil || it.Tokens != w.Tokens {
			t.Errorf("job %s item %d: error %v, tokens %d want %d", res.ID, i, it.Error, it.Tokens, w.Tokens)
		}
		if got := it.Dense != nil; got != j.Wants(schema.OutputDense) {
			t.Errorf("job %s item %d: dense present %v, outputs %v", res.ID, i, got, outs)
		} else if got && !closeVec(it.Dense, w.Dense) {
			t.Errorf("job %s item %d: dense differs from the engine's", res.ID, i)
		}
		if got := it.Sparse != nil; got != j.Wants(schema.OutputSparse) {
			t.Errorf("job %s item %d: sparse present %v, outputs %v", res.ID, i, got, outs)
		} else if got && (!slices.Equal(it.Sparse.IDs, w.SparseIDs) || !closeVec(it.Sparse.Weights, w.SparseWeights)) {
			t.Errorf("job %s item %d: sparse differs from the engine's", res.ID, i)
		}
		if got := it.ColBERT != nil; got != j.Wants(schema.OutputColBERT) {
			t.Errorf("job %s item %d: colbert present %v, outputs %v", res.ID, i, got, outs)
		} else if got {
			var flat []float32
			for _, row := range it.ColBERT {
				flat = append(flat, row...)
			}
			if !closeVec(flat, w.ColBERT) {
				t.Errorf("job %s item %d: colbert differs from the engine's", res.ID, i)
			}
		}
	}
}

func TestEndToEndEncodingsAndOutputs(t *testing.T) {
	srv := newServer(t, nil)
	e := openEngine(t, engine.Config{})
	startWorker(t, srv, e, workerOptions{})

	outputSets := [][]schema.Output{
		nil,
		{schema.OutputDense},
		{schema.OutputSparse},
		{schema.OutputColBERT},
		{schema.OutputDense, schema.OutputSparse},
		{schema.OutputSparse, schema.OutputColBERT},
		{schema.OutputDense, schema.OutputSparse, schema.OutputColBERT},
	}
	for _, enc := range []string{"msgpack", "json"} {
		t.Run(enc, func(t *testing.T) {
			opts := []client.Option{client.WithRun("e2e-" + enc)}
			if enc == "json" {
				opts = append(opts, client.WithJSON())
			}
			c, err := client.New(srv.nc, opts...)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			jobs := map[string][]schema.Output{}
			for k, outs := range outputSets {
				j := schema.NewJob(fmt.Sprintf("%s-%d", enc, k), e2eTexts...)
				j.Outputs = outs
				j.Meta = map[string]any{"k": "v"}
				if _, err := c.Submit(context.Background(), j); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, j.ID)
				jobs[j.ID] = outs
			}
			got := collect(t, c, c.Run(), ids)
			for id, res := range got {
				checkResult(t, e, res, e2eTexts, jobs[id])
				if res.Meta["k"] != "v" {
					t.Errorf("job %s: meta %v not echoed", id, res.Meta)
				}
			}
		})
	}
}

// heldRunner holds every run while held is set, until release is
// closed.
type heldRunner struct {
	engine.Runner
	held    *atomic.Bool
	release <-chan struct{}
}

func (r heldRunner) Run(ctx context.Context, in engine.RunInput) (engine.RunOutput, error) {
	if r.held.Load() {
		select {
		case <-r.release:
		case <-ctx.Done():
			return engine.RunOutput{}, ctx.Err()
		}
	}
	return r.Runner.Run(ctx, in)
}

// TestManySmallJobsShareRuns: many one-text jobs, each its own Embed
// call, are packed into shared chunks by the engine's one queue. The
// sessions' first runs are held until more than half the jobs' texts wait
// in the engine's queue (on a loaded machine a free session would
// otherwise run each job alone as it arrives: CI once saw 14 of 40
// shared), so what is asserted is the packing, not the timing.
func TestManySmallJobsShareRuns(t *testing.T) {
	srv := newServer(t, nil)
	var held atomic.Bool
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	e := openEngineWith(t, engine.Config{}, func(r engine.Runner) engine.Runner {
		return heldRunner{Runner: r, held: &held, release: release}
	})
	t.Cleanup(releaseOnce) // before the engine's Close: no run stays held
	held.Store(true)
	c, err := client.New(srv.nc, client.WithRun("small"))
	if err != nil {
		t.Fatal(err)
	}
	// Queued before any worker runs: the first fetch brings many at once.
	const n = 40
	ids := submitJobs(t, c, n, "s%02d", "small job number %d")
	ce := &fakes.Embedder{Embedder: e}
	startWorker(t, srv, ce, workerOptions{})
	natstest.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		if q := e.Stats().Queued; q <= n/2+1 {
			return fmt.Errorf("%d texts queued in the engine", q)
		}
		return nil
	})
	releaseOnce()
	// A request while the queue drains is answered (ahead of the jobs).
	cli, err := client.New(srv.nc)
	if err != nil {
		t.Fatal(err)
	}
	reqText := "a request rides along"
	var wg sync.WaitGroup
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := cli.Embed(ctx, reqText)
		if err != nil {
			t.Errorf("request: %v", err)
			return
		}
		checkResult(t, e, res, []string{reqText}, nil)
	})
	got := collect(t, c, "small", ids)
	wg.Wait()
	for id, res := range got {
		var i int
		fmt.Sscanf(id, "s%d", &i)
		checkResult(t, e, res, []string{fmt.Sprintf("small job number %d", i)}, nil)
	}
	// Each job is its own Embed call; the engine's queue packs their
	// texts: a chunk holding texts of several calls has more rows than the
	// texts it reports to each.
	shared := 0
	for _, rep := range ce.Reports() {
		for _, ch := range rep.Chunks {
			if ch.Batch > ch.Texts {
				shared++
			}
		}
	}
	t.Logf("%d jobs + 1 request in %d Embed calls, %d call-chunks shared with other jobs", n, ce.Calls(), shared)
	if shared < n/2 {
		t.Errorf("%d of %d jobs ran in chunks shared with other jobs: jobs are not packed together", shared, n)
	}
}

func TestRequestReplyAndDiscovery(t *testing.T) {
	srv := newServer(t, nil)
	e := openEngine(t, engine.Config{})
	startWorker(t, srv, e, workerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	c, err := client.New(srv.nc, client.WithOutputs(schema.OutputDense, schema.OutputSparse))
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Embed(ctx, e2eTexts...)
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, e, res, e2eTexts, []schema.Output{schema.OutputDense, schema.OutputSparse})

	// What `nats req embed.v1.embed '{...}' -H Content-Type:application/json` sends.
	msg := nats.NewMsg(schema.SubjectEmbed)
	msg.Header.Set("Content-Type", "application/json")
	msg.Data = []byte(`{"id":"1","texts":["hello"],"outputs":["dense"]}`)
	reply, err := srv.nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	jr, err := schema.DecodeResult(reply.Data, schema.EncodingJSON)
	if err != nil {
		t.Fatalf("JSON reply %q: %v", reply.Data, err)
	}
	checkResult(t, e, jr, []string{"hello"}, nil)

	// A bad job is answered with its error code, also as a micro error.
	msg = nats.NewMsg(schema.SubjectEmbed)
	msg.Header.Set("Content-Type", "application/json")
	msg.Data = []byte(`{"id":"2","texts":[]}`)
	reply, err = srv.nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	if got := reply.Header.Get("Nats-Service-Error-Code"); got != string(schema.CodeEmptyJob) {
		t.Errorf("micro error code %q, want %s", got, schema.CodeEmptyJob)
	}
	if br, err := schema.DecodeResult(reply.Data, schema.EncodingJSON); err != nil || br.Error == nil || br.Error.Code != schema.CodeEmptyJob {
		t.Errorf("bad job answered %q (%v), want an empty_job result", reply.Data, err)
	}
	bad := schema.NewJob("3", "x")
	bad.V = 2
	if res, err := c.Request(ctx, bad); !errors.Is(err, &schema.Error{Code: schema.CodeBadVersion}) || res == nil || res.ID != "3" {
		t.Errorf("Request of a version 2 job: %v, %v; want its bad_version result and error", res, err)
	}

	// Bad requests are copied to the DLQ like bad stored jobs.
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := natstest.StreamCount(t, srv.js, srv.cfg.DLQ.Name); n != 2 {
			return fmt.Errorf("%d dead letters, want the 2 bad requests", n)
		}
		return nil
	})
	for i, m := range natstest.StreamMsgs(t, srv.js, srv.cfg.DLQ.Name, "") {
		h := m.Headers()
		if id := h.Get(jetstream.HeaderDLQJobID); id != fmt.Sprint(i+2) || h.Get(jetstream.HeaderSubject) != schema.SubjectEmbed {
			t.Errorf("dead letter %d: headers %v, want job %d from %s", i, h, i+2, schema.SubjectEmbed)
		}
	}

	// Discoverable as `nats micro info embed` does it.
	info, err := srv.nc.RequestWithContext(ctx, "$SRV.INFO."+schema.ServiceName, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"name":"embed"`, `"subject":"embed.v1.embed"`, `"queue_group":"embed"`, `"version":"0.0.0-test"`} {
		if !strings.Contains(string(info.Data), want) {
			t.Errorf("$SRV.INFO.embed answer lacks %s: %s", want, info.Data)
		}
	}
	stats, err := srv.nc.RequestWithContext(ctx, "$SRV.STATS.embed", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Requests are handled off their subscription (each tenant's queue,
	// round-robin), so micro counts them but not their errors: those are
	// jetembed_jobs_total by code.
	if !strings.Contains(string(stats.Data), `"num_requests":4`) {
		t.Errorf("stats after 4 requests: %s", stats.Data)
	}
}

// submitJobs queues n one-text jobs; job i has id fmt.Sprintf(idFormat, i)
// and text fmt.Sprintf(textFormat, i). It returns the ids in order.
func submitJobs(t *testing.T, c *client.Client, n int, idFormat, textFormat string) []string {
	t.Helper()
	ids := make([]string, 0, n)
	for i := range n {
		j := schema.NewJob(fmt.Sprintf(idFormat, i), fmt.Sprintf(textFormat, i))
		if _, err := c.Submit(context.Background(), j); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	return ids
}

// TestRequestOnAnotherEndpoint: a service registered on another subject
// (as an account import may name it) is reached by a client given that
// subject with client.WithEndpoint; a client on the default subject finds
// no service there and says so with ErrNoService.
func TestRequestOnAnotherEndpoint(t *testing.T) {
	srv := newServer(t, nil)
	e := openEngine(t, engine.Config{})
	startWorker(t, srv, e, workerOptions{subject: "team-a.embed"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	c, err := client.New(srv.nc, client.WithEndpoint("team-a.embed"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Embed(ctx, e2eTexts...)
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, e, res, e2eTexts, []schema.Output{schema.OutputDense})

	def, err := client.New(srv.nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := def.Embed(ctx, "hello"); !errors.Is(err, client.ErrNoService) {
		t.Errorf("default endpoint with the service elsewhere: %v, want client.ErrNoService", err)
	}
}
