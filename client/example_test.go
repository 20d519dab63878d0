package client_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log"
	"math"
	"os"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/schema"
)

func ExampleNew() {
	f := startFleet() // a NATS server with jetembed's streams and one member (see fleet below)
	defer f.Stop()

	nc, err := nats.Connect(f.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()

	// A run groups jobs: they go to embed.jobs.<run>.<id> and their results
	// to embed.results.<run>.<id>, where Results reads them back.
	c, err := client.New(nc, client.WithRun("nightly"), client.WithOutputs(schema.OutputDense, schema.OutputSparse))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.JobSubject("doc-1"))
	fmt.Println(c.ReplySubject("doc-1"))
	fmt.Println(c.Endpoint())

	// A tenant of a shared deployment connects as its own user, with its
	// inbox prefix (nats.CustomInboxPrefix("_INBOX_producer-a")); an id that
	// is not one subject token travels base64url-encoded behind a "~".
	t, err := client.New(nc, client.WithTenant("producer-a"), client.WithRun("nightly"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(t.JobSubject("doc 2"))
	fmt.Println(t.Endpoint())

	_, err = client.New(nc, client.WithTenant("producer.a"))
	fmt.Println(err)
	// Output:
	// embed.jobs.nightly.doc-1
	// embed.results.nightly.doc-1
	// embed.v1.embed
	// embed.jobs.producer-a.nightly.~ZG9jIDI
	// embed.v1.embed.producer-a
	// client: tenant "producer.a" is not one subject token
}

func ExampleClient_Submit() {
	f := startFleet()
	f.Pause() // nobody pulls jobs for now: they stay queued
	defer f.Stop()

	nc, err := nats.Connect(f.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc, client.WithRun("nightly"))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	job := schema.NewJob("doc-1", "first chunk", "second chunk")
	ack, err := c.Submit(ctx, job)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ack.Stream, ack.Sequence, ack.Duplicate)

	// The same job again while it is queued is not stored twice.
	ack, err = c.Submit(ctx, job)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ack.Duplicate)
	// Output:
	// EMBED_JOBS 1 false
	// true
}

func ExampleClient_Results() {
	f := startFleet()
	defer f.Stop()

	nc, err := nats.Connect(f.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc, client.WithRun("nightly"))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	for _, id := range []string{"doc-1", "doc-2", "doc-3"} {
		if _, err := c.Submit(ctx, schema.NewJob(id, "a chunk of "+id, "another chunk")); err != nil {
			log.Fatal(err)
		}
	}

	// Results yields the run's stored results, then waits for new ones
	// until ctx ends: stop once every job is answered.
	var lines []string
	for r, err := range c.Results(ctx, c.Run()) {
		if err != nil {
			log.Fatal(err)
		}
		lines = append(lines, fmt.Sprintf("%s: %d items, error %v", r.ID, len(r.Items), r.Err()))
		if len(lines) == 3 {
			break
		}
	}
	slices.Sort(lines)
	fmt.Println(strings.Join(lines, "\n"))

	// A resumed run reads what is already stored, and no more.
	n := 0
	for _, err := range c.Results(ctx, "nightly", client.UntilCaughtUp()) {
		if err != nil {
			log.Fatal(err)
		}
		n++
	}
	fmt.Println(n, "results stored")
	// Output:
	// doc-1: 2 items, error <nil>
	// doc-2: 2 items, error <nil>
	// doc-3: 2 items, error <nil>
	// 3 results stored
}

func ExampleClient_Embed() {
	f := startFleet()
	defer f.Stop()

	nc, err := nats.Connect(f.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc, client.WithOutputs(schema.OutputDense, schema.OutputSparse))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	res, err := c.Embed(ctx, "hello", "hello world")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Model)
	for i, it := range res.Items {
		fmt.Printf("text %d: %d tokens, dense of %d, sparse of %d\n", i, it.Tokens, len(it.Dense), len(it.Sparse.IDs))
	}

	// A refusal is a *schema.Error with a stable code.
	_, err = c.Embed(ctx)
	var se *schema.Error
	fmt.Println(errors.As(err, &se), se.Code, se.Code.Retriable())
	// Output:
	// bge-m3@0123456789ab
	// text 0: 3 tokens, dense of 64, sparse of 1
	// text 1: 4 tokens, dense of 64, sparse of 2
	// true empty_job false
}

func ExampleClient_Rerank() {
	f := startFleet()
	defer f.Stop()

	nc, err := nats.Connect(f.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	texts := []string{"The weather is fine today.", "Reset your password from the account page."}
	res, err := c.Rerank(ctx, "how do I reset my password", texts...)
	if err != nil {
		log.Fatal(err)
	}
	// The scores come in the texts' order: sort them for the ranking.
	scores := res.Scores
	slices.SortFunc(scores, func(a, b schema.RerankScore) int { return -cmpFloat(a.Score, b.Score) })
	for _, s := range scores {
		fmt.Printf("%.2f %s\n", s.Score, texts[s.Index])
	}
	// Output:
	// 0.29 Reset your password from the account page.
	// 0.13 The weather is fine today.
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// fleet stands in, for these examples, for a running deployment: an
// in-process nats-server holding the jobs and results streams (what
// `jetembed provision` creates) and one member of the embed service
// answering queued jobs and requests as `jetembed serve` does, with a toy
// model: a text's vectors are a hashed bag of its words, so texts that
// share words score high, and every run gives the same numbers.
type fleet struct {
	URL  string
	srv  *server.Server
	nc   *nats.Conn
	dir  string
	cons natsjs.ConsumeContext
	svc  micro.Service
}

const toyModel, toyDims = "bge-m3@0123456789ab", 64

func startFleet() *fleet {
	dir, err := os.MkdirTemp("", "jetembed-example-")
	if err != nil {
		log.Fatal(err)
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		log.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		log.Fatal("nats-server not ready")
	}
	f := &fleet{URL: srv.ClientURL(), srv: srv, dir: dir}
	if f.nc, err = nats.Connect(f.URL); err != nil {
		log.Fatal(err)
	}
	js, err := natsjs.New(f.nc)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "EMBED_JOBS", Subjects: []string{"embed.jobs.>"},
		Retention: natsjs.WorkQueuePolicy}); err != nil {
		log.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "EMBED_RESULTS", Subjects: []string{"embed.results.>"}}); err != nil {
		log.Fatal(err)
	}
	cons, err := js.CreateConsumer(ctx, "EMBED_JOBS", natsjs.ConsumerConfig{Durable: "embedder", AckPolicy: natsjs.AckExplicitPolicy})
	if err != nil {
		log.Fatal(err)
	}
	if f.cons, err = cons.Consume(func(m natsjs.Msg) { f.queued(js, m) }); err != nil {
		log.Fatal(err)
	}
	f.svc, err = micro.AddService(f.nc, micro.Config{Name: "embed", Version: "1.0.0", QueueGroup: "embed"})
	if err != nil {
		log.Fatal(err)
	}
	if err := f.svc.AddEndpoint("embed", micro.HandlerFunc(f.request), micro.WithEndpointSubject(client.DefaultEndpoint)); err != nil {
		log.Fatal(err)
	}
	if err := f.svc.AddEndpoint("rerank", micro.HandlerFunc(f.rerank), micro.WithEndpointSubject(client.DefaultRerankEndpoint)); err != nil {
		log.Fatal(err)
	}
	if err := f.nc.Flush(); err != nil {
		log.Fatal(err)
	}
	return f
}

// Pause stops pulling jobs: what is submitted stays queued.
func (f *fleet) Pause() { f.cons.Stop() }

func (f *fleet) Stop() {
	f.cons.Stop()
	_ = f.svc.Stop()
	f.nc.Close()
	f.srv.Shutdown()
	f.srv.WaitForShutdown()
	_ = os.RemoveAll(f.dir)
}

// answer decodes and validates a job as the consumer does, and returns its
// result or its refusal (the job too, when any of it decoded).
func answer(data []byte, enc schema.Encoding) (*schema.Job, *schema.Result) {
	job, items, se := schema.DefaultLimits().DecodeJob(data, enc)
	if se != nil {
		id := ""
		if job != nil {
			id = job.ID
		}
		return job, schema.ErrorResult(id, se)
	}
	res := &schema.Result{V: schema.Version, ID: job.ID, Model: toyModel, Meta: job.Meta}
	for i, text := range job.Texts {
		if items != nil && items[i] != nil {
			res.Items = append(res.Items, schema.Item{Error: items[i]})
			continue
		}
		it := toyItem(text)
		if !job.Wants(schema.OutputDense) {
			it.Dense = nil
		}
		if !job.Wants(schema.OutputSparse) {
			it.Sparse = nil
		}
		if !job.Wants(schema.OutputColBERT) {
			it.ColBERT = nil
		}
		res.Items = append(res.Items, it)
		res.Usage.Tokens += it.Tokens
		res.Usage.PaddedTokens += it.Tokens
	}
	return job, res
}

// queued answers a job of the jobs stream on its reply subject, then acks it.
func (f *fleet) queued(js natsjs.JetStream, m natsjs.Msg) {
	enc := schema.EncodingFor(m.Headers().Get(schema.HeaderContentType))
	job, res := answer(m.Data(), enc)
	if job != nil {
		job.ApplyHeader(m.Headers())
	}
	if job != nil && job.Reply != "" {
		tenant := strings.Split(m.Subject(), ".")[2]
		data, err := schema.EncodeResult(res, enc)
		if err != nil {
			log.Fatal(err)
		}
		msg := &nats.Msg{Subject: job.Reply, Data: data, Header: nats.Header(schema.ResultHeader(res, tenant, job.Reply, enc))}
		if _, err := js.PublishMsg(context.Background(), msg); err != nil {
			_ = m.Nak()
			return
		}
	}
	_ = m.Ack()
}

// request answers a request-reply job.
func (f *fleet) request(req micro.Request) {
	enc := schema.EncodingFor(req.Headers().Get(schema.HeaderContentType))
	_, res := answer(req.Data(), enc)
	data, err := schema.EncodeResult(res, enc)
	if err != nil {
		log.Fatal(err)
	}
	_ = req.Respond(data, micro.WithHeaders(micro.Headers(schema.ResultHeader(res, "", req.Reply(), enc))))
}

// rerank scores texts against the query with BGE-M3's hybrid score.
func (f *fleet) rerank(req micro.Request) {
	enc := schema.EncodingFor(req.Headers().Get(schema.HeaderContentType))
	rr, se := schema.Limits{}.DecodeRerankRequest(req.Data(), enc)
	res := &schema.RerankResult{V: schema.Version, Model: toyModel, Error: se}
	if se == nil {
		res.ID = rr.ID
		w := schema.DefaultRerankWeights
		if rr.Weights != nil {
			w = *rr.Weights
		}
		q := toyItem(rr.Query)
		for i, text := range rr.Texts {
			it := toyItem(text)
			s := schema.HybridScore(&q, &it, w)
			s.Index = i
			res.Scores = append(res.Scores, s)
			res.Usage.Tokens += it.Tokens
		}
	}
	data, err := schema.EncodeRerankResult(res, enc)
	if err != nil {
		log.Fatal(err)
	}
	_ = req.Respond(data, micro.WithHeaders(micro.Headers{schema.HeaderContentType: {enc.ContentType()}}))
}

// toyItem is the toy model's vectors of text: one token per word (and two
// special ones), a word's id a hash of it, the dense vector the normalized
// sum of the words' one-hot rows, which are the ColBERT vectors.
func toyItem(text string) schema.Item {
	words := strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	it := schema.Item{Tokens: len(words) + 2, Dense: make(schema.Vector, toyDims), Sparse: &schema.Sparse{}}
	for _, w := range words {
		h := fnv.New32a()
		h.Write([]byte(w))
		id := h.Sum32() % 250002
		row := make(schema.Vector, toyDims)
		row[id%toyDims] = 1
		it.ColBERT = append(it.ColBERT, row)
		it.Dense[id%toyDims]++
		if i, found := slices.BinarySearch(it.Sparse.IDs, id); !found {
			it.Sparse.IDs = slices.Insert(it.Sparse.IDs, i, id)
			it.Sparse.Weights = slices.Insert(it.Sparse.Weights, i, 0.3)
		}
	}
	var norm float64
	for _, v := range it.Dense {
		norm += float64(v * v)
	}
	for i := range it.Dense {
		if norm > 0 {
			it.Dense[i] /= float32(math.Sqrt(norm))
		}
	}
	return it
}
