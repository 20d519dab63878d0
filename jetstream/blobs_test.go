package jetstream_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// bigColBERTJob asks for the ColBERT vectors of twelve texts of 320 words
// (about a thousand tokens) each: with the tiny model the result is about
// 1.4 MB in msgpack, over a standard server's 1 MiB max payload, while the
// job itself is small. Short texts keep the model's work small.
func bigColBERTJob(id string) *schema.Job {
	texts := make([]string, 12)
	for i := range texts {
		var b strings.Builder
		for w := range 320 {
			b.WriteString("w")
			b.WriteString(strconv.Itoa((w*7 + i) % 500))
			b.WriteByte(' ')
		}
		texts[i] = b.String()
	}
	j := schema.NewJob(id, texts...)
	j.Outputs = []schema.Output{schema.OutputColBERT}
	return j
}

// standardServer is a nats-server with the default 1 MiB max payload.
func standardServer(t *testing.T) *natsserver.Server {
	return natstest.RunServer(t, func(o *natsserver.Options) { o.MaxPayload = natsserver.MAX_PAYLOAD_SIZE })
}

// TestLargeResultBlob: a ColBERT result over the server's 1 MiB max
// payload is stored in EMBED_BLOBS; the queued job's stored result and the
// request-reply answer are small references, and the client resolves both
// to the whole result, equal to the engine's own vectors. Delivered once.
func TestLargeResultBlob(t *testing.T) {
	srv := provisioned(t, standardServer(t).ClientURL(), nil)
	e := openEngine(t, engine.Config{})
	startWorker(t, srv, e, workerOptions{blobs: true})
	c, err := client.New(srv.nc, client.WithRun("blobs"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	j := bigColBERTJob("big-1")
	if _, err := c.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	got := collect(t, c, "blobs", []string{"big-1"})["big-1"]
	checkResult(t, e, got, j.Texts, j.Outputs)
	if got.Blob != nil {
		t.Errorf("resolved result still names blob %+v", got.Blob)
	}
	stored := natstest.StreamMsgs(t, srv.js, srv.cfg.Results.Name, "")
	if len(stored) != 1 || len(stored[0].Data()) > 4096 {
		t.Fatalf("results stream holds %d messages, want one small reference", len(stored))
	}
	ref, err := schema.DecodeResult(stored[0].Data(), schema.EncodingMsgpack)
	if err != nil || ref.Blob == nil || ref.Blob.Size < 1<<20 || !strings.HasPrefix(ref.Blob.Digest, "SHA-256=") {
		t.Fatalf("stored reference %+v, %v", ref, err)
	}
	if n := natstest.StreamCount(t, srv.js, srv.cfg.DLQ.Name); n != 0 {
		t.Errorf("%d dead letters", n)
	}

	rj := bigColBERTJob("big-rr")
	res, err := c.Request(ctx, rj)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	checkResult(t, e, res, rj.Texts, rj.Outputs)

	// A client that accepts blobs of at most 1 MiB refuses to fetch this
	// one (over 1 MiB), from the stream and in a request-reply answer,
	// with an error wrapping client.ErrBlob that names the limit.
	small, err := client.New(srv.nc, client.WithRun("blobs"), client.WithMaxBlobBytes(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	var refused error
	for _, err := range small.Results(ctx, "blobs", client.UntilCaughtUp()) {
		refused = err
		break
	}
	if !errors.Is(refused, client.ErrBlob) || !strings.Contains(refused.Error(), "limit of 1048576 bytes") {
		t.Errorf("stored result through a 1 MiB client: %v, want client.ErrBlob naming the limit", refused)
	}
	if _, err := small.Request(ctx, bigColBERTJob("big-rr-small")); !errors.Is(err, client.ErrBlob) {
		t.Errorf("request through a 1 MiB client: %v, want client.ErrBlob", err)
	}
}

// TestLargeResultWithoutBlobs: with blobs off, the same result is answered
// result_too_large naming the size and the limit, dead-lettered and
// terminated on the first delivery (never embedded again); a request gets
// the error at once instead of timing out.
func TestLargeResultWithoutBlobs(t *testing.T) {
	srv := provisioned(t, standardServer(t).ClientURL(), nil)
	e := openEngine(t, engine.Config{})
	startWorker(t, srv, e, workerOptions{})
	c, err := client.New(srv.nc, client.WithRun("noblobs"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.Submit(ctx, bigColBERTJob("big-1")); err != nil {
		t.Fatal(err)
	}
	got := collect(t, c, "noblobs", []string{"big-1"})["big-1"]
	if got.Error == nil || got.Error.Code != schema.CodeResultTooLarge || got.Error.Retriable ||
		!strings.Contains(got.Error.Message, strconv.Itoa(natsserver.MAX_PAYLOAD_SIZE)) {
		t.Fatalf("result error %+v, want result_too_large naming the 1 MiB limit", got.Error)
	}
	natstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if n := natstest.StreamCount(t, srv.js, srv.cfg.DLQ.Name); n != 1 {
			return errors.New("dead letter not stored yet")
		}
		return nil
	})
	dl := natstest.StreamMsgs(t, srv.js, srv.cfg.DLQ.Name, "")[0]
	if code, n := dl.Headers().Get(jetstream.HeaderDLQCode), dl.Headers().Get(jetstream.HeaderDLQDelivered); code != "result_too_large" || n != "1" {
		t.Errorf("dead letter code %q on delivery %q, want result_too_large on 1", code, n)
	}
	jc, err := srv.js.Consumer(ctx, srv.cfg.Jobs.Name, srv.cfg.Consumer.Name)
	if err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		info, err := jc.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumAckPending != 0 || info.NumRedelivered != 0 || info.NumPending != 0 {
			return errors.New("job not settled once: " + strconv.Itoa(info.NumAckPending) + " pending, " + strconv.Itoa(info.NumRedelivered) + " redelivered")
		}
		return nil
	})

	start := time.Now()
	_, err = c.Request(ctx, bigColBERTJob("big-rr"))
	if !errors.Is(err, &schema.Error{Code: schema.CodeResultTooLarge}) {
		t.Fatalf("request: %v, want result_too_large", err)
	}
	t.Logf("request answered result_too_large in %v", time.Since(start))
}
