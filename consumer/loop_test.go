package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/internal/testkit"
	"github.com/jetembed/jetembed/schema"
)

var allOutputs = []schema.Output{schema.OutputDense, schema.OutputSparse, schema.OutputColBERT}

// checkItems compares a result's items with what the fake embedder gives
// each text alone.
func checkItems(t *testing.T, res *schema.Result, j *schema.Job) {
	t.Helper()
	if len(res.Items) != len(j.Texts) {
		t.Fatalf("%d items for %d texts", len(res.Items), len(j.Texts))
	}
	var out engine.Output
	for _, o := range j.Outputs {
		out |= map[schema.Output]engine.Output{schema.OutputDense: engine.Dense, schema.OutputSparse: engine.Sparse, schema.OutputColBERT: engine.ColBERT}[o]
	}
	if len(j.Outputs) == 0 {
		out = engine.Dense
	}
	for i, text := range j.Texts {
		w, it := want(engine.Text{Text: text, Outputs: out}), res.Items[i]
		if it.Error != nil {
			t.Errorf("item %d: error %v", i, it.Error)
			continue
		}
		if it.Tokens != w.Tokens {
			t.Errorf("item %d: tokens %d, want %d", i, it.Tokens, w.Tokens)
		}
		if !slices.Equal([]float32(it.Dense), w.Dense) {
			t.Errorf("item %d: dense %v, want %v", i, it.Dense, w.Dense)
		}
		switch {
		case w.SparseIDs == nil && it.Sparse != nil:
			t.Errorf("item %d: sparse not asked for, got %v", i, it.Sparse)
		case w.SparseIDs != nil && (it.Sparse == nil || !slices.Equal(it.Sparse.IDs, w.SparseIDs) || !slices.Equal([]float32(it.Sparse.Weights), w.SparseWeights)):
			t.Errorf("item %d: sparse %v, want %v %v", i, it.Sparse, w.SparseIDs, w.SparseWeights)
		}
		var flat []float32
		for _, row := range it.ColBERT {
			if len(row) != 2 {
				t.Fatalf("item %d: colbert row of %d", i, len(row))
			}
			flat = append(flat, row...)
		}
		if !slices.Equal(flat, w.ColBERT) {
			t.Errorf("item %d: colbert %v, want %v", i, flat, w.ColBERT)
		}
	}
}

func TestSuccess(t *testing.T) {
	for _, enc := range []schema.Encoding{schema.EncodingJSON, schema.EncodingMsgpack} {
		for _, outs := range [][]schema.Output{nil, {schema.OutputSparse}, {schema.OutputColBERT, schema.OutputDense}, allOutputs} {
			t.Run(fmt.Sprintf("%s/%v", enc, outs), func(t *testing.T) {
				r := newRig(t, Config{}, nil, nil)
				j := schema.NewJob("job-1", "alpha", "be", "gamma ray")
				j.Outputs = outs
				j.Reply = "embed.results.run1"
				j.Meta = map[string]any{"doc": "d7"}
				if got := r.submit(t, j, enc); !slices.Equal(got, []string{"ack"}) {
					t.Fatalf("calls %v, want [ack]", got)
				}
				res, p := r.resultFor(t, "job-1")
				if p.subject != "embed.results.run1" {
					t.Errorf("published to %q", p.subject)
				}
				if ct := p.header[schema.HeaderContentType]; !slices.Equal(ct, []string{enc.ContentType()}) {
					t.Errorf("content type %v", ct)
				}
				if _, ok := p.header[schema.HeaderErrorCode]; ok {
					t.Errorf("error code header on a success")
				}
				if res.V != 1 || res.ID != "job-1" || res.Model != "fake@123456789abc" || res.Error != nil {
					t.Errorf("result header fields: %+v", res)
				}
				if res.Meta["doc"] != "d7" {
					t.Errorf("meta %v not echoed", res.Meta)
				}
				checkItems(t, res, j)
				// Tokens are len+2; the one chunk pads to the longest (11).
				if want := (schema.Usage{Tokens: 7 + 4 + 11, PaddedTokens: 3 * 11}); res.Usage != want {
					t.Errorf("usage %+v, want %+v", res.Usage, want)
				}
				if r.met.get("jobs ok ") != 1 || r.met.get("texts ok ") != 3 || r.met.get("publishes") != 1 {
					t.Errorf("metrics %v", r.met)
				}
			})
		}
	}
}

// TestReplyResolution: the job's reply field, then the Embed-Reply header,
// then the request's inbox.
func TestReplyResolution(t *testing.T) {
	cases := []struct {
		name, field, header, inbox, want string
	}{
		{"field", "a.field", "a.header", "_INBOX.1", "a.field"},
		{"header", "", "a.header", "_INBOX.1", "a.header"},
		{"inbox", "", "", "_INBOX.1", "_INBOX.1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, Config{}, nil, nil)
			j := schema.NewJob("j", "x")
			j.Reply = tc.field
			d, m := delivery(t, j, schema.EncodingMsgpack, 1)
			if tc.header != "" {
				d.Header["embed-reply"] = []string{tc.header} // case differs on purpose
			}
			d.Reply = tc.inbox
			if err := r.c.Submit(context.Background(), d); err != nil {
				t.Fatal(err)
			}
			m.wait(t)
			if _, p := r.resultFor(t, "j"); p.subject != tc.want {
				t.Errorf("published to %q, want %q", p.subject, tc.want)
			}
		})
	}
}

// TestOneCallPerJob: each job is its own Embed call (the engine packs
// their texts together), and each gets its own texts back in order.
func TestOneCallPerJob(t *testing.T) {
	r := newRig(t, Config{}, nil, nil)
	var jobs []*schema.Job
	var msgs []*fakeMsg
	for k := range 5 {
		texts := make([]string, k+1)
		for i := range texts {
			texts[i] = fmt.Sprintf("job%d-text%d%s", k, i, strings.Repeat("z", i))
		}
		j := schema.NewJob(fmt.Sprintf("j%d", k), texts...)
		j.Reply = "r"
		d, m := delivery(t, j, schema.EncodingMsgpack, 1)
		if err := r.c.Submit(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		jobs, msgs = append(jobs, j), append(msgs, m)
	}
	for _, m := range msgs {
		if got := m.wait(t); !slices.Equal(got, []string{"ack"}) {
			t.Fatalf("calls %v", got)
		}
	}
	var sizes []int
	for _, c := range r.emb.Calls() {
		sizes = append(sizes, len(c))
	}
	slices.Sort(sizes)
	if !slices.Equal(sizes, []int{1, 2, 3, 4, 5}) {
		t.Fatalf("texts per Embed call %v, want one call per job", sizes)
	}
	for _, j := range jobs {
		res, _ := r.resultFor(t, j.ID)
		checkItems(t, res, j)
	}
	if r.met.get("batches") != 5 || r.met.get("batch texts") != 15 || r.met.get("queue waits") != 5 {
		t.Errorf("metrics %v", r.met)
	}
}

// TestPerJobSettling: a job is settled as soon as its own texts are
// embedded, while a job that came with it still runs.
func TestPerJobSettling(t *testing.T) {
	emb := &fakeEmb{block: make(chan struct{}), blockIf: func(texts []engine.Text) bool { return len(texts) > 1 }}
	r := newRig(t, Config{}, emb, nil)
	big, mBig := delivery(t, schema.NewJob("big", "a", "b", "c"), schema.EncodingJSON, 1)
	small, mSmall := delivery(t, schema.NewJob("small", "d"), schema.EncodingJSON, 1)
	for _, d := range []Delivery{big, small} {
		if err := r.c.Submit(context.Background(), d); err != nil {
			t.Fatal(err)
		}
	}
	if got := mSmall.wait(t); !slices.Equal(got, []string{"ack"}) {
		t.Fatalf("small job: calls %v, want [ack]", got)
	}
	if got := mBig.Calls(); len(got) != 0 {
		t.Fatalf("big job settled (%v) while its texts were still running", got)
	}
	close(emb.block)
	if got := mBig.wait(t); !slices.Equal(got, []string{"ack"}) {
		t.Fatalf("big job: calls %v, want [ack]", got)
	}
}

// TestNoGathering: an admitted job goes to the engine at once, bulk or
// interactive: nothing waits to be gathered (the engine's one queue packs
// the texts of every call), so under synctest its Embed call has started
// before the clock moved at all. An interactive job's call runs in the
// engine's interactive class.
func TestNoGathering(t *testing.T) {
	for _, j := range []*schema.Job{schema.NewJob("bulk", "x", "y"), {V: 1, ID: "i", Texts: []string{"z"}, Priority: schema.PriorityInteractive}} {
		t.Run(j.ID, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				emb := &fakeEmb{block: make(chan struct{})}
				r := newRig(t, Config{}, emb, nil)
				d, m := delivery(t, j, schema.EncodingJSON, 1)
				start := time.Now()
				if err := r.c.Submit(context.Background(), d); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				if n, waited := len(emb.Calls()), time.Since(start); n != 1 || waited != 0 {
					t.Fatalf("%d Embed calls after %v, want the job's at once", n, waited)
				}
				close(emb.block)
				if got := m.wait(t); !slices.Equal(got, []string{"ack"}) {
					t.Fatalf("calls %v, want [ack]", got)
				}
				emb.mu.Lock()
				call := emb.opts[0]
				emb.mu.Unlock()
				if (call.Class == engine.Interactive) != (j.Priority == schema.PriorityInteractive) {
					t.Errorf("Embed call class %v, want interactive %v", call.Class, j.Priority == schema.PriorityInteractive)
				}
			})
		})
	}
}

// TestPublishFailure: a result that cannot be published NAKs the job with
// backoff; on the final delivery it is kept in the DLQ and TERMed.
func TestPublishFailure(t *testing.T) {
	for _, tc := range []struct {
		n    uint64
		want string
	}{{3, "nak+delay"}, {5, "term"}} {
		pub := &fakePub{fail: func(string) error { return errInjected }}
		r := newRig(t, Config{Delivery: DeliveryLimits{MaxDeliver: 5}}, nil, pub)
		j := schema.NewJob("j", "text")
		j.Reply = "r"
		d, m := delivery(t, j, schema.EncodingMsgpack, tc.n)
		if err := r.c.Submit(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		if got := m.wait(t); !slices.Equal(got, []string{tc.want}) {
			t.Fatalf("delivery %d: calls %v, want %s", tc.n, got, tc.want)
		}
		if tc.want == "term" {
			if dlq := pub.DLQ(); len(dlq) != 1 || dlq[0].Code != ReasonPublishFailed {
				t.Errorf("dlq %+v", dlq)
			}
			if r.met.get("term publish_failed") != 1 {
				t.Errorf("metrics %v", r.met)
			}
			continue
		}
		if m.delays[0] != 400*time.Millisecond {
			t.Errorf("delay %v, want 400ms for delivery 3", m.delays[0])
		}
		if len(pub.DLQ()) != 0 || r.met.get("nak publish_failed") != 1 || r.met.get("jobs nak ") != 1 {
			t.Errorf("metrics %v", r.met)
		}
	}
}

// TestQueueWait counts from the stream's timestamp when the delivery has it.
func TestQueueWait(t *testing.T) {
	r := newRig(t, Config{}, nil, nil)
	d, m := delivery(t, schema.NewJob("j", "text"), schema.EncodingJSON, 1)
	d.StoredAt = time.Now().Add(-time.Hour)
	if err := r.c.Submit(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	m.wait(t)
	if s := r.met.get("queue wait s"); s < 3600 || s > 3700 {
		t.Errorf("queue wait %ds, want about an hour", s)
	}

	// A stream clock an hour ahead of this host's counts as no wait.
	d, m = delivery(t, schema.NewJob("k", "text"), schema.EncodingJSON, 1)
	d.StoredAt = time.Now().Add(time.Hour)
	if err := r.c.Submit(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	m.wait(t)
	if n, s := r.met.get("queue waits"), r.met.get("queue wait s"); n != 2 || s < 3600 || s > 3700 {
		t.Errorf("after a job stored in the future: %d waits summing %ds, want 2 and the first one's hour", n, s)
	}
}

// TestPublishConfirmBeforeAck: the ACK waits for the stream's confirmation.
func TestPublishConfirmBeforeAck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		confirm := make(chan struct{})
		pub := &fakePub{fail: func(string) error { <-confirm; return nil }}
		r := newRig(t, Config{}, nil, pub)
		j := schema.NewJob("j", "text")
		j.Reply = "r"
		d, m := delivery(t, j, schema.EncodingMsgpack, 1)
		if err := r.c.Submit(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		// A second of fake time is past the patience window; then everything
		// is blocked, and the publish waits for its confirmation.
		time.Sleep(time.Second)
		synctest.Wait()
		if n := len(r.emb.Calls()); n != 1 {
			t.Fatalf("%d Embed calls, want 1", n)
		}
		if calls := m.Calls(); len(calls) != 0 {
			t.Fatalf("message settled before the publish was confirmed: %v", calls)
		}
		close(confirm)
		if got := m.wait(t); !slices.Equal(got, []string{"ack"}) {
			t.Fatalf("calls %v", got)
		}
	})
}

func TestNoReplyAcksAndWarnsOnce(t *testing.T) {
	r := newRig(t, Config{}, nil, nil)
	for k := range 3 {
		if got := r.submit(t, schema.NewJob(fmt.Sprint("j", k), "secret text"), schema.EncodingJSON); !slices.Equal(got, []string{"ack"}) {
			t.Fatalf("calls %v", got)
		}
	}
	if n := len(r.pub.Results()); n != 0 {
		t.Errorf("%d results published with no reply", n)
	}
	logs := r.log.String()
	if n := strings.Count(logs, "no reply subject: result discarded (logged once)"); n != 1 {
		t.Errorf("warned %d times, want once:\n%s", n, logs)
	}
	if strings.Contains(logs, "secret") {
		t.Errorf("a text reached the log:\n%s", logs)
	}
	if n := strings.Count(logs, `"msg":"job settled"`); n != 3 {
		t.Errorf("%d job lines, want one a job", n)
	}
}

// waitFor polls cond until it holds ([testkit.CheckFor] for a bool).
func waitFor(tb testing.TB, cond func() bool) {
	tb.Helper()
	testkit.CheckFor(tb, 10*time.Second, time.Millisecond, func() error {
		if cond() {
			return nil
		}
		return errors.New("condition never held")
	})
}

// TestInteractiveTenants: a queued job asking for priority interactive
// runs in the engine's interactive class only when its tenant is one of
// InteractiveTenants (nil: every tenant); another tenant's runs as bulk,
// so a bulk producer cannot take the budget of the callers who wait.
func TestInteractiveTenants(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tenants []string
		want    bool
	}{
		{"every tenant", nil, true},
		{"allowed", []string{"gw", testTenant}, true},
		{"not allowed", []string{"gw"}, false},
		{"none", []string{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, Config{InteractiveTenants: tc.tenants}, nil, nil)
			d, m := delivery(t, &schema.Job{V: 1, ID: "i", Texts: []string{"z"}, Priority: schema.PriorityInteractive}, schema.EncodingJSON, 1)
			if err := r.c.Submit(context.Background(), d); err != nil {
				t.Fatal(err)
			}
			if got := m.wait(t); !slices.Equal(got, []string{"ack"}) {
				t.Fatalf("calls %v, want [ack]", got)
			}
			r.emb.mu.Lock()
			call := r.emb.opts[0]
			r.emb.mu.Unlock()
			if got := call.Class == engine.Interactive; got != tc.want {
				t.Errorf("interactive %v, want %v", got, tc.want)
			}
		})
	}
}

// TestCallOptions: every job's Embed call says, explicitly, how the
// engine's one queue admits it: its class, its tenant, its deadline and
// how long it may wait. A request with a deadline waits until then (at
// most MaxRequestWait), not RequestWait, which is for requests without
// one; a stored job waits as long as it takes (the fetch loop waits with
// it); the result limit travels as the output limit.
func TestCallOptions(t *testing.T) {
	deadline := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	for _, tc := range []struct {
		name        string
		request     bool
		deadline    bool
		wantClass   engine.Class
		wantMaxWait time.Duration
	}{
		{"stored job", false, false, engine.Bulk, 0},
		{"stored job with a deadline", false, true, engine.Bulk, 0},
		{"request", true, false, engine.Interactive, 7 * time.Second},
		{"request with a deadline", true, true, engine.Interactive, MaxRequestWait},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, Config{RequestWait: 7 * time.Second, MaxResultBytes: 1 << 20}, nil, nil)
			j := schema.NewJob("call", "some text")
			if tc.deadline {
				j.Deadline = deadline.Format(time.RFC3339Nano)
			}
			s, m := delivery(t, j, schema.EncodingJSON, 1)
			var d Delivery = s
			if tc.request {
				req := asRequest(s, func(map[string][]string, []byte) error { return nil })
				req.Tenant = testTenant
				d = req
			}
			if err := r.c.Submit(context.Background(), d); err != nil {
				t.Fatal(err)
			}
			m.wait(t)
			r.emb.mu.Lock()
			call := r.emb.opts[0]
			r.emb.mu.Unlock()
			var wantDeadline time.Time
			if tc.deadline {
				wantDeadline = deadline
			}
			if call.Class != tc.wantClass || call.Tenant != testTenant || !call.Deadline.Equal(wantDeadline) ||
				call.MaxWait != tc.wantMaxWait || call.OutputLimit != 1<<20 || call.Admitted == nil {
				t.Errorf("call %+v: want class %v, tenant %q, deadline %v, max wait %v, output limit %d and an Admitted hook",
					call, tc.wantClass, testTenant, wantDeadline, tc.wantMaxWait, 1<<20)
			}
		})
	}
}

// TestLocalRequestSizeChecked: a request decoded in this process (the HTTP
// API inside serve) is held to the job size limit as an encoded body is:
// over it, it is answered job_too_large and nothing runs.
func TestLocalRequestSizeChecked(t *testing.T) {
	r := newRig(t, Config{Limits: schema.Limits{MaxJobBytes: 64}}, nil, nil)
	answers := make(chan *schema.Result, 2)
	submit := func(j *schema.Job) *schema.Result {
		t.Helper()
		err := r.c.Submit(context.Background(), &Request{
			Arrival: Arrival{Header: map[string][]string{}, Received: time.Now()},
			Job:     j, Local: true,
			Answer: func(res *schema.Result) (map[string][]string, []byte) { answers <- res; return nil, nil },
		})
		if err != nil {
			t.Fatal(err)
		}
		return <-answers
	}
	if res := submit(schema.NewJob("small", "fits")); res.Error != nil {
		t.Fatalf("small: %v", res.Error)
	}
	before := len(embedded(r.emb))
	res := submit(schema.NewJob("big", strings.Repeat("x", 40), strings.Repeat("y", 40)))
	if res.Error == nil || res.Error.Code != schema.CodeJobTooLarge {
		t.Errorf("big: %+v, want job_too_large", res.Error)
	}
	if n := len(embedded(r.emb)) - before; n != 0 {
		t.Errorf("big ran %d texts", n)
	}
}
