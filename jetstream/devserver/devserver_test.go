package devserver

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/jetembed/jetembed/internal/natstest"
	"github.com/jetembed/jetembed/jetstream"
)

func startDev(t *testing.T, o Options) *server.Server {
	t.Helper()
	s, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

func TestDevServerProvisionsAndKeepsData(t *testing.T) {
	dir := t.TempDir()
	port := natstest.FreePort(t)
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s := startDev(t, Options{Listen: listen, DataDir: dir})
	if !strings.HasSuffix(s.ClientURL(), listen) {
		t.Fatalf("ClientURL = %s, want it on %s", s.ClientURL(), listen)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	nc, err := jetstream.Connect(ctx, jetstream.Options{URLs: []string{s.ClientURL()}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	r, err := jetstream.Provision(ctx, js, jetstream.DefaultConfig())
	if err != nil {
		t.Fatalf("Provision: %v\n%s", err, r)
	}
	if !r.Changed() {
		t.Fatalf("provisioning a fresh server changed nothing:\n%s", r)
	}
	if _, err := js.Publish(ctx, "embed.jobs.a", []byte("job")); err != nil {
		t.Fatal(err)
	}

	// Restart on the same data directory: everything is still there.
	s.Shutdown()
	s.WaitForShutdown()
	s = startDev(t, Options{Listen: listen, DataDir: dir})
	nc2, err := jetstream.Connect(ctx, jetstream.Options{URLs: []string{s.ClientURL()}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	js, err = jetstream.New(nc2)
	if err != nil {
		t.Fatal(err)
	}
	r, err = jetstream.Provision(ctx, js, jetstream.DefaultConfig())
	if err != nil || r.Changed() {
		t.Fatalf("after restart: changed=%v err=%v\n%s", r.Changed(), err, r)
	}
	st, err := js.Stream(ctx, "EMBED_JOBS")
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != 1 {
		t.Errorf("jobs after restart = %d, want 1", n)
	}
}

func TestDevServerRandomPort(t *testing.T) {
	s := startDev(t, Options{Listen: "127.0.0.1:-1", DataDir: t.TempDir()})
	if strings.HasSuffix(s.ClientURL(), ":4222") || strings.HasSuffix(s.ClientURL(), ":-1") {
		t.Errorf("ClientURL = %s, want a random port", s.ClientURL())
	}
	if !s.JetStreamEnabled() {
		t.Error("JetStream is off")
	}
}

func TestDevServerPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var logs bytes.Buffer
	start := time.Now()
	_, err = Start(Options{Listen: l.Addr().String(), DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err == nil {
		t.Fatal("started on a port in use")
	}
	if !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("err = %v, want it to say the address is in use", err)
	}
	if time.Since(start) >= readyTimeout {
		t.Errorf("took %v: the failure was not noticed before the timeout", time.Since(start))
	}
	if !strings.Contains(logs.String(), "nats-server") {
		t.Errorf("the logger got nothing: %q", logs.String())
	}
}

func TestDevServerBadOptions(t *testing.T) {
	for _, o := range []Options{
		{Listen: "nonsense", DataDir: t.TempDir()},
		{Listen: "127.0.0.1:http", DataDir: t.TempDir()},
		{Listen: "127.0.0.1:-1"},
	} {
		if s, err := Start(o); err == nil {
			s.Shutdown()
			t.Errorf("Start(%+v) succeeded", o)
		}
	}
}
