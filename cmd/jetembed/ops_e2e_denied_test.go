package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// TestOpsPublishDeniedAndBlobs runs serve as the `embedder` user of
// deploy/nats/accounts.conf (a standard 1 MiB max payload). A job whose
// reply is a subject the embedder may not publish to (allowed by
// --reply-allow, not by the server) is reported: logged with its id,
// dead-lettered publish_denied and terminated on its first delivery, not
// ACKed as a success. A request whose ColBERT result exceeds the max payload is
// answered with a blob reference that producer-a, with its own
// permissions, resolves to the whole result.
func TestOpsPublishDeniedAndBlobs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url, caFile, s := serveUnderAccounts(t, ctx, "--reply-allow", "orders.>")

	a := connectProducer(t, url, caFile, "producer-a")
	ca, err := client.New(a.Conn, client.WithTenant("producer-a"))
	if err != nil {
		t.Fatal(err)
	}
	job := schema.NewJob("denied-1", "a text whose result may not be delivered")
	job.Reply = "orders.someone-else.1"
	if _, err := ca.Submit(ctx, job); err != nil {
		t.Fatal(err)
	}
	op, err := nats.Connect(url, nats.RootCAs(caFile), nats.UserInfo("provisioner", opsPassword("provisioner")))
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	ojs, err := natsjs.New(op)
	if err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		if natstest.StreamCount(t, ojs, "EMBED_DLQ") == 0 {
			return errors.New("no dead letter yet")
		}
		return nil
	})
	dlq, err := ojs.Stream(ctx, "EMBED_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	dl, err := dlq.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if code, id, n := dl.Header.Get(jetstream.HeaderDLQCode), dl.Header.Get(jetstream.HeaderDLQJobID), dl.Header.Get(jetstream.HeaderDLQDelivered); code != "publish_denied" || id != "denied-1" || n != "1" {
		t.Errorf("dead letter: code %q job %q delivery %q, want publish_denied, denied-1, 1", code, id, n)
	}
	jc, err := ojs.Consumer(ctx, "EMBED_JOBS", "embedder")
	if err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		info, err := jc.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumAckPending != 0 || info.NumRedelivered != 0 {
			return fmt.Errorf("job not settled once: %d pending, %d redelivered", info.NumAckPending, info.NumRedelivered)
		}
		return nil
	})
	if l := s.log.String(); !strings.Contains(l, `"job":"denied-1"`) || !strings.Contains(l, "publish_denied") {
		t.Errorf("serve did not log the denied job:\n%s", l)
	}

	big := bigColBERT("big-1")
	res, err := ca.Request(ctx, big)
	if err != nil {
		t.Fatalf("large request: %v", err)
	}
	if res.Blob != nil || len(res.Items) != len(big.Texts) || len(res.Items[0].ColBERT) < 500 {
		t.Fatalf("large request: %d items, blob %+v", len(res.Items), res.Blob)
	}
	select {
	case err := <-a.violations:
		t.Errorf("producer-a hit a permission violation: %v", err)
	default:
	}
}

// bigColBERT asks for the ColBERT vectors of twelve texts of about a
// thousand tokens: about 1.4 MB with the tiny model, over 1 MiB.
func bigColBERT(id string) *schema.Job {
	texts := make([]string, 12)
	for i := range texts {
		var b strings.Builder
		for w := range 320 {
			b.WriteString("w" + strconv.Itoa((w*7+i)%500) + " ")
		}
		texts[i] = b.String()
	}
	j := schema.NewJob(id, texts...)
	j.Outputs = []schema.Output{schema.OutputColBERT}
	return j
}
