package jetstream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/internal/natstest"
)

func TestMatchSubject(t *testing.T) {
	for _, c := range []struct {
		filter, subject string
		want            bool
	}{
		{"embed.results.>", "embed.results.run.1", true},
		{"embed.results.>", "embed.results", false},
		{"embed.results.>", "embed.resultsx.a", false},
		{"embed.*.x", "embed.a.x", true},
		{"embed.*.x", "embed.a.y", false},
		{"embed.*", "embed.a.b", false},
		{"_INBOX.>", "_INBOX.abc.def", true},
		{"embed.results.>", "_INBOX.abc", false},
	} {
		if got := matchSubject(c.filter, c.subject); got != c.want {
			t.Errorf("matchSubject(%q, %q) = %v, want %v", c.filter, c.subject, got, c.want)
		}
	}
}

func TestSemver(t *testing.T) {
	for in, want := range map[string]string{
		"1.2.3":          "1.2.3",
		"v1.2.3-rc.1":    "1.2.3-rc.1",
		"dev":            "0.0.0-dev",
		"f5e06f2-dirty":  "0.0.0-f5e06f2-dirty",
		"v0.1.0-3-gabc":  "0.1.0-3-gabc",
		"":               "0.0.0-dev",
		"0123":           "0.0.0-dev",
		"weird/ver sion": "0.0.0-weird-ver-sion",
	} {
		if got := semver(in); got != want {
			t.Errorf("semver(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSubjectTokens(t *testing.T) {
	if got := subjectToken("a.b*c> d"); got != "a_b_c__d" {
		t.Errorf("subjectToken = %q", got)
	}
}

func TestPublisherConfirms(t *testing.T) {
	s := natstest.RunServer(t)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := natsjs.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := DefaultConfig()
	p, err := NewPublisher(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// No streams yet: a result for the results subjects is not confirmed.
	err = p.PublishResult(ctx, "embed.results.r.1", "1", nil, []byte("x"))
	if !errors.Is(err, ErrNotConfirmed) {
		t.Fatalf("publish without a stream: %v, want ErrNotConfirmed", err)
	}
	if _, err := Provision(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := p.PublishResult(ctx, "embed.results.r.1", "1", map[string][]string{"Content-Type": {"application/json"}}, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	st, _ := js.Stream(ctx, cfg.Results.Name)
	if info, _ := st.Info(ctx); info.State.Msgs != 1 {
		t.Errorf("%d results stored for one job published twice", info.State.Msgs)
	}

	// A core inbox gets the result directly.
	sub, err := nc.SubscribeSync("_INBOX.test")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.PublishResult(ctx, "_INBOX.test", "2", nil, []byte("y")); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.NextMsg(time.Second); err != nil || string(m.Data) != "y" {
		t.Errorf("inbox got %v, %v", m, err)
	}

	dl := consumer.DeadLetter{JobID: "3", Code: "bad_payload", Message: "no", NumDelivered: 1}
	h := map[string][]string{"Nats-Msg-Id": {"3"}, "Content-Type": {"application/json"}, HeaderSubject: {"embed.jobs.x"}}
	for range 2 {
		if err := p.PublishDLQ(ctx, dl, h, []byte("body")); err != nil {
			t.Fatal(err)
		}
	}
	dlq, _ := js.Stream(ctx, cfg.DLQ.Name)
	m, err := dlq.GetLastMsgForSubject(ctx, "embed.dlq.bad_payload")
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := dlq.Info(ctx); info.State.Msgs != 1 {
		t.Errorf("%d dead letters for one job terminated twice", info.State.Msgs)
	}
	if m.Header.Get(HeaderDLQCode) != "bad_payload" || m.Header.Get(HeaderDLQMessage) != "no" || m.Header.Get(HeaderDLQJobID) != "3" ||
		m.Header.Get(HeaderDLQDelivered) != "1" || m.Header.Get(HeaderSubject) != "embed.jobs.x" || m.Header.Get("Content-Type") != "application/json" || string(m.Data) != "body" {
		t.Errorf("dead letter %v %q", m.Header, m.Data)
	}
}
