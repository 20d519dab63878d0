package jetstream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/internal/natstest"
)

// TestDeadLettersCappedPerTenant: the dead-letter stream caps letters per
// subject, and a letter's subject names its tenant
// (embed.dlq.<code>.<tenant>): producer-a flooding the DLQ with junk of
// one code keeps only its newest letters there, and producer-b's letter
// of the same code stays. With one subject a code (no tenant token) the
// flood would evict it.
func TestDeadLettersCappedPerTenant(t *testing.T) {
	s := natstest.RunServer(t)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := natsjs.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := DefaultConfig()
	const perSubject = 5
	cfg.DLQ.MaxMsgsPerSubject = perSubject
	if _, err := Provision(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	p, err := NewPublisher(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	letter := func(tenant, id string) {
		t.Helper()
		dl := consumer.DeadLetter{JobID: id, Tenant: tenant, Code: "bad_payload", Message: "junk", NumDelivered: 1, MsgID: "dlq-" + tenant + "-" + id}
		h := map[string][]string{HeaderSubject: {"embed.jobs." + tenant + ".run." + id}}
		if err := p.PublishDLQ(ctx, dl, h, []byte("junk of "+tenant)); err != nil {
			t.Fatal(err)
		}
	}
	letter("producer-b", "b1")
	for i := range 10 * perSubject {
		letter("producer-a", fmt.Sprintf("a%d", i))
	}
	dlq, err := js.Stream(ctx, cfg.DLQ.Name)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := dlq.GetLastMsgForSubject(ctx, "embed.dlq.bad_payload.producer-b"); err != nil || m.Header.Get(HeaderDLQJobID) != "b1" {
		t.Fatalf("producer-b's dead letter after producer-a's flood: %v, %v", m, err)
	}
	info, err := dlq.Info(ctx, natsjs.WithSubjectFilter("embed.dlq.>"))
	if err != nil {
		t.Fatal(err)
	}
	if got := info.State.Subjects["embed.dlq.bad_payload.producer-a"]; got != perSubject {
		t.Errorf("producer-a keeps %d letters, want its newest %d", got, perSubject)
	}
	if m, err := dlq.GetLastMsgForSubject(ctx, "embed.dlq.bad_payload.producer-a"); err != nil || m.Header.Get(HeaderDLQJobID) != fmt.Sprintf("a%d", 10*perSubject-1) {
		t.Errorf("producer-a's newest letter: %v, %v", m, err)
	}
	if info.State.Msgs != perSubject+1 {
		t.Errorf("%d letters stored, want %d", info.State.Msgs, perSubject+1)
	}
	// The letters of a code are read with or without a tenant.
	dls, err := OpenDeadLetters(nc, cfg.DLQ.Name)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for l, err := range dls.Letters(ctx, "bad_payload") {
		if err != nil {
			t.Fatal(err)
		}
		n++
		if l.Header.Get(HeaderDLQCode) != "bad_payload" {
			t.Errorf("letter %d: %v", l.Seq, l.Header)
		}
	}
	if n != perSubject+1 {
		t.Errorf("dlq list bad_payload read %d letters, want %d", n, perSubject+1)
	}
	for _, err := range dls.Letters(ctx, "bad_reply") {
		t.Errorf("a letter of a code never dead-lettered: %v", err)
	}
}

// TestProvisionDLQPerSubjectCap: provision sets the per-subject cap on the
// dead-letter stream, and raises an older stream (none) to it in place.
func TestProvisionDLQPerSubjectCap(t *testing.T) {
	s := natstest.RunServer(t)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := natsjs.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	old := DefaultConfig()
	old.DLQ.MaxMsgsPerSubject = 0
	if _, err := Provision(ctx, js, old); err != nil {
		t.Fatal(err)
	}
	st, _ := js.Stream(ctx, old.DLQ.Name)
	if c := st.CachedInfo().Config; c.MaxMsgsPerSubject > 0 {
		t.Fatalf("uncapped stream has MaxMsgsPerSubject %d", c.MaxMsgsPerSubject)
	}
	if _, err := Provision(ctx, js, DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	st, _ = js.Stream(ctx, old.DLQ.Name)
	if c := st.CachedInfo().Config; c.MaxMsgsPerSubject != DefaultDLQMaxPerSubject || c.Discard != natsjs.DiscardOld || c.DiscardNewPerSubject {
		t.Errorf("dead-letter stream after provision: per subject %d, discard %v (new per subject %v)", c.MaxMsgsPerSubject, c.Discard, c.DiscardNewPerSubject)
	}
}
