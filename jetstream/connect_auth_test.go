package jetstream

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/jetembed/jetembed/internal/natstest"
)

func TestConnectToken(t *testing.T) {
	s := natstest.RunServer(t, natstest.WithoutJetStream(), func(o *server.Options) { o.Authorization = "t0ken" })
	if _, err := connectWithin(t, 5*time.Second, Options{URLs: []string{s.ClientURL()}, Token: "nope"}); !errors.Is(err, ErrAuthentication) || !strings.Contains(err.Error(), "with a token") {
		t.Fatalf("wrong token: err = %v, want ErrAuthentication naming the token method", err)
	}
	if _, err := connectWithin(t, 5*time.Second, Options{URLs: []string{s.ClientURL()}}); !errors.Is(err, nats.ErrAuthorization) || !strings.Contains(err.Error(), "without credentials") {
		t.Fatalf("no token: err = %v", err)
	}
	if _, err := connectWithin(t, 5*time.Second, Options{URLs: []string{s.ClientURL()}, Token: "t0ken"}); err != nil {
		t.Fatalf("right token: %v", err)
	}
}

func TestConnectNKey(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	otherFile := filepath.Join(t.TempDir(), "other.nk")
	if err := os.WriteFile(otherFile, otherSeed, 0o600); err != nil {
		t.Fatal(err)
	}

	s := natstest.RunServer(t, natstest.WithoutJetStream(), func(o *server.Options) {
		o.Nkeys = []*server.NkeyUser{{Nkey: pub}}
	})
	if _, err := connectWithin(t, 5*time.Second, Options{URLs: []string{s.ClientURL()}, NKeyFile: seedFile}); err != nil {
		t.Fatalf("known nkey: %v", err)
	}
	_, err = connectWithin(t, 5*time.Second, Options{URLs: []string{s.ClientURL()}, NKeyFile: otherFile})
	if !errors.Is(err, ErrAuthentication) || !strings.Contains(err.Error(), otherFile) {
		t.Fatalf("unknown nkey: err = %v, want ErrAuthentication naming the seed file", err)
	}
	if strings.Contains(err.Error(), string(otherSeed)) {
		t.Fatal("error leaks the seed")
	}
}

func TestConnectClusterSkipsDeadServer(t *testing.T) {
	s := natstest.RunServer(t, natstest.WithoutJetStream())
	dead := natstest.FreePort(t)
	nc, err := connectWithin(t, 5*time.Second, Options{URLs: []string{"127.0.0.1:" + strconv.Itoa(dead) + "," + s.ClientURL()}})
	if err != nil {
		t.Fatalf("one of two servers up: %v", err)
	}
	if nc.ConnectedUrl() != s.ClientURL() {
		t.Errorf("connected to %s, want %s", nc.ConnectedUrl(), s.ClientURL())
	}
}

// silentListener accepts connections and never speaks: a server that hangs.
func silentListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	return "nats://" + l.Addr().String()
}

func TestConnectHungServerIsBounded(t *testing.T) {
	url := silentListener(t)
	start := time.Now()
	_, err := connectWithin(t, 5*time.Second, Options{URLs: []string{url}, ConnectTimeout: 300 * time.Millisecond})
	if !errors.Is(err, ErrNoServer) {
		t.Fatalf("err = %v, want ErrNoServer", err)
	}
	if !strings.Contains(err.Error(), url) || !strings.Contains(err.Error(), "timeout") {
		t.Errorf("err = %q, want it to name the URL and the timeout", err)
	}
	t.Logf("%v after %v", err, time.Since(start))
}

func TestConnectCanceledByContext(t *testing.T) {
	url := silentListener(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		nc, err := Connect(ctx, Options{URLs: []string{url}, ConnectTimeout: time.Minute, Logger: quietLog})
		if nc != nil {
			nc.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), url) {
			t.Fatalf("err = %v, want the context's deadline naming the URL", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Connect ignored its context")
	}
}
