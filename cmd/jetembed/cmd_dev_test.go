package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/internal/testkit"
)

// lockedBuffer lets the test read what the running command printed so far.
type lockedBuffer = testkit.Buffer

func TestDevCommand(t *testing.T) {
	model := tinyModel(t, "tiny-hidden")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := startDev(ctx, t, model)
	url := d.url

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := natsjs.New(nc)
	tctx, tcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer tcancel()
	for _, name := range []string{"EMBED_JOBS", "EMBED_RESULTS", "EMBED_DLQ"} {
		if _, err := js.Stream(tctx, name); err != nil {
			t.Errorf("stream %s: %v", name, err)
		}
	}
	if _, err := js.KeyValue(tctx, "EMBED_ENGINES"); err != nil {
		t.Errorf("kv: %v", err)
	}
	// It serves: the request-reply endpoint answers with a vector.
	natstest.CheckFor(t, 15*time.Second, 50*time.Millisecond, func() error {
		msg := nats.NewMsg("embed.v1.embed")
		msg.Header.Set("Content-Type", "application/json")
		msg.Data = []byte(`{"id":"1","texts":["hello"]}`)
		reply, err := nc.RequestMsg(msg, 5*time.Second)
		if err != nil {
			return err
		}
		if !strings.Contains(string(reply.Data), `"dense":[`) {
			return fmt.Errorf("reply without a dense vector: %s", reply.Data)
		}
		return nil
	})

	cancel() // what SIGINT does through main's context
	select {
	case code := <-d.done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, d.errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("dev did not stop after its context ended")
	}
	natstest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		if nc.IsConnected() {
			return errors.New("server still up after dev returned")
		}
		return nil
	})
}

func TestDevCommandRejectsReplicas(t *testing.T) {
	code, _, errOut := runCmd(t, context.Background(), "dev", "--replicas", "3", "--data", t.TempDir())
	if code != 2 || !strings.Contains(errOut, "single node") {
		t.Errorf("exit %d: %s", code, errOut)
	}
}

func TestSubjectRoot(t *testing.T) {
	for in, want := range map[string]string{"embed.jobs.>": "embed.jobs", "a.*": "a", "plain": "plain", ">": ">"} {
		if got := subjectRoot(in); got != want {
			t.Errorf("subjectRoot(%q) = %q, want %q", in, got, want)
		}
	}
}
