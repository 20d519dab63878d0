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

	"github.com/jetembed/jetembed/internal/consumer"
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
