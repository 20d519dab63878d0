package faults

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/internal/testkit"
	"github.com/jetembed/jetembed/schema"
)

// TestServeSurvivesServerClose: the server closes serve's connection twice,
// and serve carries on. First a kick (the monitoring "kick" of a client,
// as an operator or the system account does it): nats.go reconnects.
// Then a job whose reply subject makes serve's result publish exceed the
// server's max control line: the server answers -ERR and closes, and
// nats.go treats that as final. Before the fix serve exited on it ("the
// fetch loop ended"), and every restart met the redelivered job again;
// now serve dials a new connection and rebuilds its consumer, service and
// fetch loop. After each close, new jobs get their results and the
// process is still the same one.
func TestServeSurvivesServerClose(t *testing.T) {
	binary(t)
	// A short max control line, so that a reply subject within any reply
	// policy's length limit still overflows it.
	srv := natstest.RunServer(t, func(o *server.Options) { o.MaxControlLine = 256 })
	cfg := faultConfig(1, 2*time.Second)
	cfg.Consumer.MaxDeliver = 2
	b := newBulk(t, srv.ClientURL(), cfg, "close")
	p := startServe(t, serveArgs(t, srv.ClientURL(), cfg, "--nats-name", "close-victim")...)

	n := 0
	submit := func(k int) {
		t.Helper()
		for range k {
			id := fmt.Sprintf("close-%03d", n)
			n++
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := b.c.Submit(ctx, schema.NewJob(id, "a text after the close"))
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			b.ids = append(b.ids, id)
			b.texts[id] = 1
		}
	}
	submit(3)
	b.waitResults(3, 30*time.Second)

	// 1. The server drops the connection.
	cid := clientID(t, srv, "close-victim")
	if err := srv.DisconnectClientByID(cid); err != nil {
		t.Fatal(err)
	}
	submit(3)
	b.waitResults(6, 30*time.Second)
	if !p.Running() {
		t.Fatalf("serve exited after a kick:\n%s", testkit.Tail(p.Log.String(), 20))
	}

	// 2. The server closes the connection with an error nats.go does not
	// reconnect after.
	reply := b.c.ReplySubject("long-reply") + "." + strings.Repeat("x", 250-len(b.c.ReplySubject("long-reply")))
	j := schema.NewJob("long-reply", "its result overflows the control line")
	j.Reply = reply
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := b.c.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		if !strings.Contains(strings.ToLower(p.Log.String()), "maximum control line") {
			return fmt.Errorf("serve has not met the control line limit yet")
		}
		return nil
	})
	submit(3)
	b.waitResults(9, 60*time.Second)
	if !p.Running() {
		t.Fatalf("serve exited after the server closed its connection:\n%s", testkit.Tail(p.Log.String(), 20))
	}
	if got := clientID(t, srv, "close-victim"); got == cid {
		t.Errorf("serve still on connection %d", cid)
	}
	if testing.Verbose() {
		t.Logf("serve log (tail):\n%s", testkit.Tail(p.Log.String(), 25))
	}
}

// clientID is the server's id of the connection named name.
func clientID(t *testing.T, srv *server.Server, name string) uint64 {
	t.Helper()
	var id uint64
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		cz, err := srv.Connz(&server.ConnzOptions{})
		if err != nil {
			return err
		}
		for _, c := range cz.Conns {
			if c.Name == name {
				id = c.Cid
				return nil
			}
		}
		return fmt.Errorf("no connection named %s", name)
	})
	return id
}
