package jetstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/jetembed/jetembed/consumer"
	"github.com/jetembed/jetembed/internal/natstest"
)

// TestConfirmCoreCorrelates publishes concurrently to subjects the user may
// and may not publish to: every denied publish, and only those, is reported
// as denied, whatever order the server's violations come in.
func TestConfirmCoreCorrelates(t *testing.T) {
	s := natstest.RunServer(t, natstest.WithoutJetStream(), func(o *server.Options) {
		o.Users = []*server.User{{Username: "u", Password: "p", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{"ok.>"}},
		}}}
	})
	logged := make(chan error, 64)
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("u", "p"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		logged <- err
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 40)
	for i := range errs {
		subject := fmt.Sprintf("ok.%d", i)
		if i%2 == 1 {
			subject = fmt.Sprintf("no.%d", i)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = confirmCore(ctx, nc, subject, func() error { return nc.Publish(subject, []byte("x")) })
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if denied := errors.Is(err, consumer.ErrPublishDenied); denied != (i%2 == 1) {
			t.Errorf("publish %d: %v", i, err)
		}
	}
	// The connection's own error handler still hears every violation
	// (asynchronously: the last may still be on its way).
	natstest.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if n := len(logged); n != 20 {
			return fmt.Errorf("error handler saw %d errors, want 20", n)
		}
		return nil
	})
}

type deliverySink chan consumer.Delivery

func (s deliverySink) Submit(_ context.Context, d consumer.Delivery) error {
	s <- d
	return nil
}

// TestRequestAnswerDeniedOrLost: a service whose user may not answer
// requests (no allow_responses, no grant on the inbox) has its answer
// refused: ErrPublishDenied. With allow_responses, an answer sent after
// the connection was dropped and re-established is refused too (the new
// connection was never delivered the request), but that is ErrReplyLost, a
// transient failure, not a denial.
func TestRequestAnswerDeniedOrLost(t *testing.T) {
	for _, tc := range []struct {
		name      string
		responses *server.ResponsePermission
		kick      bool
		want      error
		notWant   error
	}{
		{"no-allow-responses", nil, false, consumer.ErrPublishDenied, ErrReplyLost},
		{"allowed", &server.ResponsePermission{MaxMsgs: 1}, false, nil, nil},
		{"after-reconnect", &server.ResponsePermission{MaxMsgs: 1}, true, ErrReplyLost, consumer.ErrPublishDenied},
		// A real refusal soon after a reconnect counts as lost; once the
		// window is over it is a denial again.
		{"denied-after-reconnect", nil, true, ErrReplyLost, consumer.ErrPublishDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := natstest.RunServer(t, natstest.WithoutJetStream(), func(o *server.Options) {
				o.Users = []*server.User{
					{Username: "svc", Password: "p", Permissions: &server.Permissions{
						Publish:   &server.SubjectPermission{Allow: []string{"$SRV.>"}},
						Subscribe: &server.SubjectPermission{Allow: []string{"svc.req", "$SRV.>", "_INBOX.>"}},
						Response:  tc.responses,
					}},
					{Username: "req", Password: "p"},
				}
			})
			nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("svc", "p"), nats.Name("svc"),
				nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond),
				nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			sink := make(deliverySink, 1)
			svc, err := StartService(ctx, nc, sink, ServiceOptions{Subject: "svc.req"})
			if err != nil {
				t.Fatal(err)
			}
			defer svc.Stop()
			rc, err := nats.Connect(s.ClientURL(), nats.UserInfo("req", "p"))
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			inbox := nats.NewInbox()
			answers, err := rc.SubscribeSync(inbox)
			if err != nil {
				t.Fatal(err)
			}
			if err := rc.PublishRequest("svc.req", inbox, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			d := <-sink
			if tc.kick {
				before := nc.Stats().Reconnects
				cz, err := s.Connz(&server.ConnzOptions{User: "svc"})
				if err != nil || len(cz.Conns) != 1 {
					t.Fatalf("connz: %v %+v", err, cz)
				}
				if err := s.DisconnectClientByID(cz.Conns[0].Cid); err != nil {
					t.Fatal(err)
				}
				natstest.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
					if nc.Stats().Reconnects == before || !nc.IsConnected() {
						return errors.New("not reconnected yet")
					}
					return nil
				})
			}
			err = d.Respond(nil, []byte("answer"))
			if tc.name == "denied-after-reconnect" {
				if !errors.Is(err, tc.want) {
					t.Fatalf("answer right after the reconnect: %v, want %v", err, tc.want)
				}
				defer func(w time.Duration) { staleWindow = w }(staleWindow)
				staleWindow = 50 * time.Millisecond
				time.Sleep(2 * staleWindow)
				if err := rc.PublishRequest("svc.req", inbox, []byte(`{}`)); err != nil {
					t.Fatal(err)
				}
				err = (<-sink).Respond(nil, []byte("answer"))
				tc.want, tc.notWant = consumer.ErrPublishDenied, ErrReplyLost
			}
			if tc.want == nil {
				if err != nil {
					t.Fatalf("answer: %v", err)
				}
				if _, err := answers.NextMsg(5 * time.Second); err != nil {
					t.Fatalf("no answer: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.want) || errors.Is(err, tc.notWant) {
				t.Fatalf("answer: %v, want %v and not %v", err, tc.want, tc.notWant)
			}
		})
	}
}
