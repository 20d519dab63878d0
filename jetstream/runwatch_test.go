package jetstream_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
)

// TestRunWatchConnection: the status of a bulk run (jetembed submit's) names a lost
// connection while nats.go reconnects, and clears once it is back.
func TestRunWatchConnection(t *testing.T) {
	dir := t.TempDir()
	opts := natstest.DefaultOptions(dir)
	s := natstest.RunServerWithOptions(t, opts)
	port := s.Addr().(*net.TCPAddr).Port
	nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	watch := jetstream.RunWatch(nc, "EMBED_JOBS", "embedder")
	ctx := context.Background()
	if st := watch(ctx, 0); st != "" {
		t.Fatalf("connected: status %q", st)
	}
	s.Shutdown()
	s.WaitForShutdown()
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if !strings.Contains(watch(ctx, 0), "disconnected from NATS, reconnecting") {
			return errNotYet
		}
		return nil
	})
	again := natstest.DefaultOptions(dir)
	again.Port = port
	natstest.RunServerWithOptions(t, again)
	natstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if watch(ctx, 0) != "" {
			return errNotYet
		}
		return nil
	})
}

var errNotYet = errors.New("not there yet")
