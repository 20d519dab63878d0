// Package jstest is the JetStream test rig of the packages above
// jetstream: a nats-server with the jetembed streams, consumer and buckets
// provisioned, and a connection to it. [Provisioned] is the one way the
// tests of jetstream (its external _test package), fleet, faults and
// node set one up, instead of each repeating Connect, New and
// Provision.
//
// The server itself comes from internal/natstest (in process, a cluster,
// a domain, or the nats-server binary for restarts); this package adds
// the provisioning step, which needs package jetstream, so that natstest
// stays free of the project. Package jetstream's internal tests cannot
// import it (jstest imports jetstream): they provision with
// jetstream.Provision directly, which is what several of them test.
//
// Only tests import it.
package jstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
)

// Server is a provisioned NATS server: its client URL, the configuration
// it was provisioned with, and a connection (closed at the test's end)
// with its JetStream handle.
type Server struct {
	URL    string
	Config jetstream.Config
	NC     *nats.Conn
	JS     natsjs.JetStream
}

// Config is [jetstream.DefaultConfig] as the tests use it, changed by
// edit (nil: none): a 5 s AckWait and no redelivery backoff, so a
// redelivery a test waits for comes within seconds.
func Config(edit func(*jetstream.Config)) jetstream.Config {
	cfg := jetstream.DefaultConfig()
	cfg.Consumer.AckWait = 5 * time.Second
	cfg.Consumer.BackOff = nil
	if edit != nil {
		edit(&cfg)
	}
	return cfg
}

// Provisioned starts an in-process server ([natstest.RunServer]) and
// provisions [Config](edit) on it.
func Provisioned(t testing.TB, edit func(*jetstream.Config)) *Server {
	t.Helper()
	return ProvisionedAt(t, natstest.RunServer(t).ClientURL(), edit)
}

// ProvisionedAt provisions [Config](edit) on the server at url (a
// natstest process, cluster or one with options of its own) through a
// connection that rides out server restarts ([natstest.Connect]).
func ProvisionedAt(t testing.TB, url string, edit func(*jetstream.Config)) *Server {
	t.Helper()
	cfg := Config(edit)
	nc := natstest.Connect(t, url)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	Provision(t, js, cfg)
	return &Server{URL: url, Config: cfg, NC: nc, JS: js}
}

// Provision provisions cfg through js (one of the test's own: under a
// JetStream domain, or to change a provisioned server), failing the test
// on an error.
func Provision(t testing.TB, js natsjs.JetStream, cfg jetstream.Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := jetstream.Provision(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
}

// Engines opens the engines bucket of s through js (nil: s's own) as
// the fleet's store.
func (s *Server) Engines(t testing.TB, js natsjs.JetStream) *jetstream.KVStore {
	t.Helper()
	if js == nil {
		js = s.JS
	}
	kv, err := jetstream.OpenKVStore(context.Background(), js, s.Config.Engines.Name)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}
