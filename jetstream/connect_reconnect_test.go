package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetembed/jetembed/internal/natstest"
)

// TestReconnectAfterServerClose: a too-long control line makes the server
// answer -ERR and close the connection, and nats.go does not reconnect
// after that error; Reconnect dials a new connection that works.
func TestReconnectAfterServerClose(t *testing.T) {
	srv := natstest.RunServer(t)
	o := Options{URLs: []string{srv.ClientURL()}, Logger: quietLog}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nc, err := Connect(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	closed := nc.StatusChanged(nats.CLOSED)
	if err := nc.Publish("too.long."+strings.Repeat("x", 5000), nil); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("the server did not close the connection")
	}
	if err := nc.LastError(); err == nil || !strings.Contains(strings.ToLower(err.Error()), "control line") {
		t.Fatalf("connection closed with %v, want the max control line error", err)
	}
	again, err := Reconnect(ctx, o, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if _, err := again.Request("$JS.API.INFO", nil, 5*time.Second); err != nil {
		t.Errorf("the new connection does not work: %v", err)
	}
}

// TestReconnectWaitsAndStops: after connections lost in a row Reconnect
// waits before it dials, and it gives up when ctx ends.
func TestReconnectWaitsAndStops(t *testing.T) {
	port := natstest.FreePort(t)
	o := Options{URLs: []string{fmt.Sprintf("nats://127.0.0.1:%d", port)}, Logger: quietLog, ConnectTimeout: 200 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	if _, err := Reconnect(ctx, o, 3); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Reconnect to nothing = %v, want the context's end", err)
	}
	if _, err := Reconnect(context.Background(), Options{URLs: []string{"nats://127.0.0.1:1"}, NKeyFile: "/nonexistent"}, 1); !errors.Is(err, ErrOptions) {
		t.Errorf("Reconnect with unusable options = %v, want ErrOptions", err)
	}
}
