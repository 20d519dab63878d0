package jetstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/jetembed/jetembed/internal/natstest"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// connectWithin runs Connect and fails the test if it does not return
// within limit: a first connect must never hang.
func connectWithin(t *testing.T, limit time.Duration, o Options) (*nats.Conn, error) {
	t.Helper()
	if o.Logger == nil {
		o.Logger = quietLog
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	nc, err := Connect(ctx, o)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Connect did not return within %v", limit)
	}
	if nc != nil {
		t.Cleanup(nc.Close)
	}
	return nc, err
}

func TestConnectWrongPort(t *testing.T) {
	port := natstest.FreePort(t) // nothing listens there any more
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	_, err := connectWithin(t, 5*time.Second, Options{URLs: []string{url}, ConnectTimeout: time.Second})
	t.Log(err)
	if !errors.Is(err, ErrNoServer) {
		t.Fatalf("err = %v, want ErrNoServer", err)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("err = %v, want it to wrap ECONNREFUSED", err)
	}
	want := "no nats server at " + url + ": connection refused"
	if err.Error() != want {
		t.Errorf("err = %q\nwant  %q", err, want)
	}
}

func TestConnectWrongPortCluster(t *testing.T) {
	a, b := natstest.FreePort(t), natstest.FreePort(t)
	_, err := connectWithin(t, 5*time.Second, Options{URLs: []string{fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", a, b)}, ConnectTimeout: time.Second})
	t.Log(err)
	if !errors.Is(err, ErrNoServer) {
		t.Fatalf("err = %v, want ErrNoServer", err)
	}
	for _, p := range []int{a, b} {
		if !strings.Contains(err.Error(), fmt.Sprintf("nats://127.0.0.1:%d: connection refused", p)) {
			t.Errorf("err = %q does not name port %d and its cause", err, p)
		}
	}
}

func TestConnectBadCredentials(t *testing.T) {
	s := natstest.RunServer(t, natstest.WithUser("alice", "right-password"), natstest.WithoutJetStream())
	_, err := connectWithin(t, 5*time.Second, Options{URLs: []string{s.ClientURL()}, User: "alice", Password: "wrong-password"})
	t.Log(err)
	if !errors.Is(err, ErrAuthentication) || !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("err = %v, want ErrAuthentication wrapping nats.ErrAuthorization", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, `"alice"`) || !strings.Contains(msg, s.ClientURL()) {
		t.Errorf("err = %q, want it to name the user and the URL", msg)
	}
	if strings.Contains(msg, "password") && strings.Contains(msg, "wrong-password") {
		t.Errorf("err = %q leaks the password", msg)
	}

	nc, err := connectWithin(t, 5*time.Second, Options{URLs: []string{s.ClientURL()}, User: "alice", Password: "right-password"})
	if err != nil {
		t.Fatalf("right password: %v", err)
	}
	if !nc.IsConnected() {
		t.Fatal("not connected")
	}
}

func TestConnectPasswordInURLIsRedacted(t *testing.T) {
	s := natstest.RunServer(t, natstest.WithUser("bob", "hunter2"), natstest.WithoutJetStream())
	url := strings.Replace(s.ClientURL(), "nats://", "nats://bob:nope-secret@", 1)
	_, err := connectWithin(t, 5*time.Second, Options{URLs: []string{url}})
	if !errors.Is(err, ErrAuthentication) {
		t.Fatalf("err = %v, want ErrAuthentication", err)
	}
	if !strings.Contains(err.Error(), `as user "bob" of the URL`) {
		t.Errorf("err = %q does not name the user of the URL", err)
	}
	if strings.Contains(err.Error(), "nope-secret") {
		t.Errorf("err = %q leaks the password of the URL", err)
	}
}

func runTLSServer(t *testing.T, pki testPKI) *server.Server {
	t.Helper()
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: pki.CertFile, KeyFile: pki.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	return natstest.RunServer(t, natstest.WithoutJetStream(), func(o *server.Options) {
		o.TLSConfig = tc
		o.TLS = true
		o.TLSTimeout = 2
	})
}

func TestConnectTLSUntrustedServer(t *testing.T) {
	pki := newTestPKI(t)
	s := runTLSServer(t, pki)
	_, err := connectWithin(t, 5*time.Second, Options{URLs: []string{s.ClientURL()}})
	t.Log(err)
	if !errors.Is(err, ErrTLS) {
		t.Fatalf("err = %v, want ErrTLS", err)
	}
	if !strings.Contains(err.Error(), "certificate") || !strings.Contains(err.Error(), "CA") {
		t.Errorf("err = %q, want it to say the certificate is not trusted and to suggest a CA", err)
	}

	nc, err := connectWithin(t, 5*time.Second, Options{URLs: []string{s.ClientURL()}, TLS: TLSOptions{CAFile: pki.CAFile}})
	if err != nil {
		t.Fatalf("with the CA: %v", err)
	}
	if !nc.IsConnected() || nc.ConnectedServerId() == "" {
		t.Fatal("not connected over TLS")
	}
}

func TestConnectMutualTLS(t *testing.T) {
	pki := newTestPKI(t)
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: pki.CertFile, KeyFile: pki.KeyFile, CaFile: pki.CAFile, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	s := natstest.RunServer(t, natstest.WithoutJetStream(), func(o *server.Options) {
		o.TLSConfig, o.TLS, o.TLSVerify, o.TLSTimeout = tc, true, true, 2
	})
	_, err = connectWithin(t, 5*time.Second, Options{URLs: []string{s.ClientURL()}, TLS: TLSOptions{CAFile: pki.CAFile}})
	t.Log(err)
	if !errors.Is(err, ErrTLS) {
		t.Fatalf("no client certificate: err = %v, want ErrTLS", err)
	}
	nc, err := connectWithin(t, 5*time.Second, Options{URLs: []string{s.ClientURL()},
		TLS: TLSOptions{CAFile: pki.CAFile, CertFile: pki.ClientCertFile, KeyFile: pki.ClientKeyFile}})
	if err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	if !nc.IsConnected() {
		t.Fatal("not connected")
	}
}

func TestConnectTLSWantedButNotOffered(t *testing.T) {
	pki := newTestPKI(t)
	s := natstest.RunServer(t, natstest.WithoutJetStream())
	_, err := connectWithin(t, 5*time.Second, Options{URLs: []string{s.ClientURL()}, TLS: TLSOptions{CAFile: pki.CAFile}})
	t.Log(err)
	if !errors.Is(err, ErrTLS) || !errors.Is(err, nats.ErrSecureConnWanted) {
		t.Fatalf("err = %v, want ErrTLS wrapping nats.ErrSecureConnWanted", err)
	}
}

func TestConnectOptionErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"two auth methods", Options{User: "a", Token: "t"}},
		{"missing creds file", Options{CredsFile: "/nonexistent/x.creds"}},
		{"missing CA", Options{TLS: TLSOptions{CAFile: "/nonexistent/ca.pem"}}},
		{"cert without key", Options{TLS: TLSOptions{CertFile: "/nonexistent/c.pem"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := connectWithin(t, 2*time.Second, tc.o)
			if !errors.Is(err, ErrOptions) {
				t.Fatalf("err = %v, want ErrOptions", err)
			}
		})
	}
}

func TestConnectReconnectsAfterServerRestart(t *testing.T) {
	port := natstest.FreePort(t)
	dir := t.TempDir()
	opts := func() *server.Options {
		o := natstest.DefaultOptions(dir)
		o.Port = port
		return o
	}
	s := natstest.RunServerWithOptions(t, opts())
	nc, err := connectWithin(t, 5*time.Second, Options{URLs: []string{s.ClientURL()}})
	if err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	s.WaitForShutdown()
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if nc.IsConnected() {
			return errors.New("still connected")
		}
		return nil
	})
	natstest.RunServerWithOptions(t, opts())
	natstest.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		if !nc.IsConnected() {
			return fmt.Errorf("not reconnected (status %v)", nc.Status())
		}
		return nil
	})
	if nc.Reconnects == 0 {
		t.Error("Reconnects = 0 after a reconnect")
	}
}

func TestReconnectDelay(t *testing.T) {
	prev := time.Duration(0)
	for n := 1; n <= 40; n++ {
		d := reconnectDelay(n)
		if d <= 0 || d > reconnectMax {
			t.Fatalf("reconnectDelay(%d) = %v, want in (0, %v]", n, d, reconnectMax)
		}
		if n <= 3 && d < prev/2 {
			t.Errorf("reconnectDelay(%d) = %v shrank from %v", n, d, prev)
		}
		prev = d
	}
	if d := reconnectDelay(1); d > reconnectMin {
		t.Errorf("first delay %v > %v", d, reconnectMin)
	}
	if d := reconnectDelay(100); d < reconnectMax*3/4 {
		t.Errorf("late delay %v < 3/4 of %v", d, reconnectMax)
	}
}
