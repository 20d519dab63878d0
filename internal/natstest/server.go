package natstest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// readyTimeout bounds how long a server may take to accept connections.
const readyTimeout = 10 * time.Second

var errNotReady = errors.New("nats-server not ready for connections within 10s")

// Option changes the options of a server before it starts, e.g. to add users
// or TLS.
type Option func(*server.Options)

// WithoutJetStream turns JetStream off, for tests of plain core NATS.
func WithoutJetStream() Option {
	return func(o *server.Options) { o.JetStream = false }
}

// WithUser requires clients to log in as user with password.
func WithUser(user, password string) Option {
	return func(o *server.Options) {
		o.Users = append(o.Users, &server.User{Username: user, Password: password})
	}
}

// DefaultOptions are the options of [RunServer] before any [Option]:
// loopback, a random port, JetStream on with its store in dir.
func DefaultOptions(dir string) *server.Options {
	return &server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  dir,
		NoLog:     true,
		NoSigs:    true,
		// Results with ColBERT vectors exceed the 1 MiB default.
		MaxPayload: 8 << 20,
	}
}

// RunServer starts an in-process nats-server with JetStream on a random
// loopback port, with its store in a fresh t.TempDir(). It fails the test if
// the server is not ready within 10s, and shuts it down at cleanup.
func RunServer(t testing.TB, opts ...Option) *server.Server {
	t.Helper()
	o := DefaultOptions(t.TempDir())
	for _, opt := range opts {
		opt(o)
	}
	return RunServerWithOptions(t, o)
}

// RunServerWithOptions starts an in-process nats-server with exactly o.
func RunServerWithOptions(t testing.TB, o *server.Options) *server.Server {
	t.Helper()
	s, err := startServer(o)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

func startServer(o *server.Options) (*server.Server, error) {
	s, err := server.NewServer(o)
	if err != nil {
		return nil, err
	}
	errs := &errorLog{}
	if o.NoLog {
		s.SetLogger(errs, false, false)
	} else {
		s.ConfigureLogger()
	}
	go s.Start()
	if !s.ReadyForConnections(readyTimeout) {
		s.Shutdown()
		if last := errs.String(); last != "" {
			return nil, fmt.Errorf("%w: %s", errNotReady, last)
		}
		return nil, errNotReady
	}
	return s, nil
}

// errorLog keeps the last errors of a server that logs nothing else, so
// that one that never becomes ready (a port taken, say: nats-server then
// only logs, it does not fail) says why.
type errorLog struct {
	mu   sync.Mutex
	last []string
}

func (l *errorLog) keep(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last = append(l.last, fmt.Sprintf(format, v...))
	if len(l.last) > 3 {
		l.last = l.last[1:]
	}
}

func (l *errorLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.last, "; ")
}

func (l *errorLog) Fatalf(format string, v ...any) { l.keep(format, v...) }
func (l *errorLog) Errorf(format string, v ...any) { l.keep(format, v...) }
func (*errorLog) Noticef(string, ...any)           {}
func (*errorLog) Warnf(string, ...any)             {}
func (*errorLog) Debugf(string, ...any)            {}
func (*errorLog) Tracef(string, ...any)            {}

// Connect is a client connection to url that reconnects quickly and
// forever, as jetstream.Connect does, so it rides out the server restarts
// of a test; it is closed when the test ends.
func Connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
