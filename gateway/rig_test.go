package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/gateway"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// fakeModel is the id the fake fleet member serves.
const fakeModel = "bge-m3@0123456789ab"

// fakeFleet is a member of the embed service on a real nats-server that
// answers like the fleet without a model: a text "code:X" fails its job
// with code X, "item:X" fails its item with X, "slow" waits two seconds,
// "big" makes a job of more than one text result_too_large;
// any other text gets a 4-dimensional unit vector derived from its length,
// one sparse weight and two ColBERT rows.
type fakeFleet struct {
	svc  micro.Service
	jobs atomic.Int64
	mu   sync.Mutex
	seen []int // texts per job, in arrival order
}

func startFakeFleet(t testing.TB, nc *nats.Conn) *fakeFleet {
	t.Helper()
	f := &fakeFleet{}
	svc, err := micro.AddService(nc, micro.Config{Name: schema.ServiceName, Version: "0.0.1",
		Metadata: map[string]string{"model": fakeModel}, QueueGroup: schema.ServiceName})
	if err != nil {
		t.Fatal(err)
	}
	err = svc.AddEndpoint(jetstream.EndpointName, micro.HandlerFunc(f.handle),
		micro.WithEndpointSubject(schema.SubjectEmbed), micro.WithEndpointQueueGroup(schema.ServiceName))
	if err != nil {
		t.Fatal(err)
	}
	err = svc.AddEndpoint(jetstream.RerankEndpointName, micro.HandlerFunc(f.rerank),
		micro.WithEndpointSubject(schema.SubjectRerank), micro.WithEndpointQueueGroup(schema.ServiceName))
	if err != nil {
		t.Fatal(err)
	}
	err = svc.AddEndpoint(jetstream.TokenizeName, micro.HandlerFunc(f.tokenize),
		micro.WithEndpointSubject(schema.SubjectTokenize), micro.WithEndpointQueueGroup(schema.ServiceName))
	if err != nil {
		t.Fatal(err)
	}
	// The info endpoint every member answers (not a queue group), as the
	// fleet's: the gateway reads members from it, not from $SRV.INFO.
	err = svc.AddEndpoint(jetstream.InfoName, micro.HandlerFunc(func(req micro.Request) {
		body, _ := json.Marshal(svc.Info())
		_ = req.Respond(body)
	}), micro.WithEndpointSubject(schema.SubjectInfo), micro.WithEndpointQueueGroupDisabled())
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	f.svc = svc
	t.Cleanup(func() { _ = svc.Stop() })
	return f
}

func fakeDense(text string) []float32 {
	a := float64(len(text))
	return []float32{float32(math.Cos(a)), float32(math.Sin(a)), 0, 0}
}

func (f *fakeFleet) handle(req micro.Request) {
	f.jobs.Add(1)
	enc := schema.EncodingFor(req.Headers().Get(schema.HeaderContentType))
	job, err := schema.DecodeJob(req.Data(), enc)
	if err != nil {
		_ = req.Error("bad_payload", err.Error(), nil)
		return
	}
	f.mu.Lock()
	f.seen = append(f.seen, len(job.Texts))
	f.mu.Unlock()
	res := &schema.Result{V: 1, ID: job.ID, Model: fakeModel}
	if len(job.Texts) > 1 && slices.Contains(job.Texts, "big") {
		res = schema.ErrorResult(job.ID, schema.Errorf(schema.CodeResultTooLarge, "fake: over max payload"))
	}
	for _, text := range job.Texts {
		switch {
		case text == "code:quota_exceeded":
			res = schema.ErrorResult(job.ID, schema.QuotaExceeded(7500*time.Millisecond))
		case strings.HasPrefix(text, "code:"):
			res = schema.ErrorResult(job.ID, schema.Errorf(schema.Code(strings.TrimPrefix(text, "code:")), "fake refusal"))
		case text == "slow":
			time.Sleep(2 * time.Second)
		}
		if res.Error != nil {
			break
		}
		it := schema.Item{Tokens: len(text) + 2}
		if strings.HasPrefix(text, "item:") {
			it.Error = schema.Errorf(schema.Code(strings.TrimPrefix(text, "item:")), "fake item refusal")
		} else {
			if job.Wants(schema.OutputDense) {
				it.Dense = fakeDense(text)
			}
			if job.Wants(schema.OutputSparse) {
				it.Sparse = &schema.Sparse{IDs: []uint32{uint32(len(text))}, Weights: []float32{0.5}}
			}
			if job.Wants(schema.OutputColBERT) {
				it.ColBERT = []schema.Vector{fakeDense(text), fakeDense(text + "x")}
			}
		}
		res.Items = append(res.Items, it)
		res.Usage.Tokens += it.Tokens
	}
	data, err := schema.EncodeResult(res, enc)
	if err != nil {
		_ = req.Error("internal", err.Error(), nil)
		return
	}
	_ = req.Respond(data, micro.WithHeaders(micro.Headers(schema.ResultHeader(res, "", req.Reply(), enc))))
}

// fakeItem is the fake fleet's vectors of text.
func fakeItem(text string) schema.Item {
	return schema.Item{Tokens: len(text) + 2, Dense: fakeDense(text),
		Sparse:  &schema.Sparse{IDs: []uint32{uint32(len(text))}, Weights: []float32{0.5}},
		ColBERT: []schema.Vector{fakeDense(text), fakeDense(text + "x")}}
}

// rerank scores the fake vectors with the hybrid formula.
func (f *fakeFleet) rerank(req micro.Request) {
	enc := schema.EncodingFor(req.Headers().Get(schema.HeaderContentType))
	rr, se := schema.Limits{}.DecodeRerankRequest(req.Data(), enc)
	if se != nil {
		_ = req.Error(string(se.Code), se.Message, nil)
		return
	}
	f.mu.Lock()
	f.seen = append(f.seen, len(rr.Texts)+1)
	f.mu.Unlock()
	w := schema.DefaultRerankWeights
	if rr.Weights != nil {
		w = *rr.Weights
	}
	q := fakeItem(rr.Query)
	res := &schema.RerankResult{V: 1, ID: rr.ID, Model: fakeModel}
	for i, text := range rr.Texts {
		if strings.HasPrefix(text, "code:") {
			res = &schema.RerankResult{V: 1, ID: rr.ID, Error: schema.Errorf(schema.Code(strings.TrimPrefix(text, "code:")), "fake refusal")}
			break
		}
		it := fakeItem(text)
		sc := schema.HybridScore(&q, &it, w)
		sc.Index = i
		res.Scores = append(res.Scores, sc)
		res.Usage.Tokens += it.Tokens
	}
	data, _ := schema.EncodeRerankResult(res, enc)
	h := map[string][]string{schema.HeaderContentType: {enc.ContentType()}}
	if res.Error != nil {
		_ = req.Error(string(res.Error.Code), string(res.Error.Code), data, micro.WithHeaders(h))
		return
	}
	_ = req.Respond(data, micro.WithHeaders(h))
}

// tokenize answers a token per word, between <s> and </s>.
func (f *fakeFleet) tokenize(req micro.Request) {
	enc := schema.EncodingFor(req.Headers().Get(schema.HeaderContentType))
	tr, se := schema.Limits{}.DecodeTokenizeRequest(req.Data(), enc)
	if se != nil {
		_ = req.Error(string(se.Code), se.Message, nil)
		return
	}
	res := &schema.TokenizeResult{V: 1, ID: tr.ID, Model: fakeModel}
	for _, text := range tr.Texts {
		it := schema.TokenizeItem{IDs: []uint32{0}, Tokens: []string{"<s>"}, Special: []bool{true}}
		for _, w := range strings.Fields(text) {
			it.IDs, it.Tokens, it.Special = append(it.IDs, uint32(len(w))), append(it.Tokens, "▁"+w), append(it.Special, false)
		}
		it.IDs, it.Tokens, it.Special = append(it.IDs, 2), append(it.Tokens, "</s>"), append(it.Special, true)
		it.Count = len(it.IDs)
		res.Items = append(res.Items, it)
	}
	data, _ := schema.EncodeTokenizeResult(res, enc)
	// As the fleet does: an answer over tokenizeRoom is result_too_large.
	if len(data) > tokenizeRoom {
		se := schema.Errorf(schema.CodeResultTooLarge, "the answer would be %d bytes", len(data))
		data, _ = schema.EncodeTokenizeResult(&schema.TokenizeResult{V: 1, ID: tr.ID, Model: fakeModel, Error: se}, enc)
		_ = req.Error(string(se.Code), se.Message, data, micro.WithHeaders(map[string][]string{schema.HeaderContentType: {enc.ContentType()}}))
		return
	}
	_ = req.Respond(data, micro.WithHeaders(map[string][]string{schema.HeaderContentType: {enc.ContentType()}}))
}

// tokenizeRoom is the largest tokenize answer of the fake fleet: a
// server's max payload of 256 KiB less the fleet's header room.
const tokenizeRoom = 256<<10 - 2048

func (f *fakeFleet) jobSizes() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.seen...)
}

// fleet is the gateway's view of the fleet through the real producer
// client, as cmd/jetembed wires it.
type fleet struct {
	c  *client.Client
	nc *nats.Conn
}

func (f fleet) Request(ctx context.Context, job *schema.Job) (*schema.Result, error) {
	res, err := f.c.Request(ctx, job)
	if errors.Is(err, client.ErrNoService) {
		return nil, fmt.Errorf("%w: %w", gateway.ErrNoMember, err)
	}
	return res, err
}

func (f fleet) Rerank(ctx context.Context, req *schema.RerankRequest) (*schema.RerankResult, error) {
	res, err := f.c.RerankRequest(ctx, req)
	if errors.Is(err, client.ErrNoService) {
		return nil, fmt.Errorf("%w: %w", gateway.ErrNoMember, err)
	}
	return res, err
}

func (f fleet) Tokenize(ctx context.Context, req *schema.TokenizeRequest) (*schema.TokenizeResult, error) {
	res, err := f.c.TokenizeRequest(ctx, req)
	if errors.Is(err, client.ErrNoService) {
		return nil, fmt.Errorf("%w: %w", gateway.ErrNoMember, err)
	}
	return res, err
}

func (f fleet) Ping(ctx context.Context) (gateway.Member, error) {
	m, err := f.c.PingService(ctx)
	if errors.Is(err, client.ErrNoService) {
		return gateway.Member{}, fmt.Errorf("%w: %w", gateway.ErrNoMember, err)
	}
	if err != nil {
		return gateway.Member{}, err
	}
	return gateway.Member{ID: m.ID, Model: m.Model, Version: m.Version}, nil
}

// rig is a gateway served on a loopback port in front of a fake fleet on a
// real nats-server.
type rig struct {
	gw    *gateway.Server
	url   string
	nc    *nats.Conn
	fake  *fakeFleet
	reg   *prometheus.Registry
	logs  *bytes.Buffer
	logMu *sync.Mutex
}

func newRig(t testing.TB, withFleet bool, tweak func(*gateway.Config)) *rig {
	t.Helper()
	srv := natstest.RunServer(t, natstest.WithoutJetStream())
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	r := &rig{nc: nc, reg: prometheus.NewRegistry(), logs: &bytes.Buffer{}, logMu: &sync.Mutex{}}
	if withFleet {
		r.fake = startFakeFleet(t, nc)
	}
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := gateway.Config{Requester: fleet{c, nc}, Pinger: fleet{c, nc}, Registerer: r.reg,
		Logger: slog.New(slog.NewTextHandler(lockedWriter{r.logMu, r.logs}, nil))}
	if tweak != nil {
		tweak(&cfg)
	}
	gw, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.gw = gw
	r.url = "http://" + serve(t, gw)
	return r
}

// serve runs gw on a loopback port until the test ends and returns the
// address.
func serve(t testing.TB, gw *gateway.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String()
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// answer is one HTTP answer, its body decoded as JSON when it is.
type answer struct {
	status int
	header http.Header
	body   []byte
	json   map[string]any
}

func (a answer) errField(k string) string {
	e, _ := a.json["error"].(map[string]any)
	s, _ := e[k].(string)
	return s
}

func (r *rig) do(t *testing.T, method, path, body string, header ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, r.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answer{status: resp.StatusCode, header: resp.Header, body: b}
	_ = json.Unmarshal(b, &a.json)
	return a
}

func (r *rig) post(t *testing.T, path, body string, header ...string) answer {
	t.Helper()
	return r.do(t, http.MethodPost, path, body, header...)
}
