package natstest

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

func connect(t *testing.T, url string) natsjs.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func publishAndCount(ctx context.Context, t *testing.T, js natsjs.JetStream, stream string, replicas int) {
	t.Helper()
	if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: stream, Subjects: []string{"t.>"}, Replicas: replicas, Storage: natsjs.FileStorage}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	if _, err := js.Publish(ctx, "t.1", []byte("x")); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

func msgs(ctx context.Context, js natsjs.JetStream, stream string) (uint64, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

func TestRunServerJetStream(t *testing.T) {
	s := RunServer(t)
	if !s.JetStreamEnabled() {
		t.Fatal("JetStream is off")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js := connect(t, s.ClientURL())
	publishAndCount(ctx, t, js, "S", 1)
	if n, err := msgs(ctx, js, "S"); err != nil || n != 1 {
		t.Fatalf("msgs = %d, %v; want 1", n, err)
	}
}

func TestRunServerWithUser(t *testing.T) {
	s := RunServer(t, WithUser("alice", "s3cret"), WithoutJetStream())
	if _, err := nats.Connect(s.ClientURL(), nats.UserInfo("alice", "wrong")); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("wrong password: err = %v, want authorization violation", err)
	}
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("alice", "s3cret"))
	if err != nil {
		t.Fatalf("right password: %v", err)
	}
	nc.Close()
}

func TestClusterStreamLeaderRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := RunCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := connect(t, c.URLs())
	publishAndCount(ctx, t, js, "R3", 3)
	leader := c.WaitOnStreamLeader("", "R3")
	i := c.Index(leader)
	if i < 0 {
		t.Fatal("stream leader is not a cluster node")
	}
	if other := c.RandomNonStreamLeader("", "R3"); other == nil || other == leader {
		t.Fatalf("RandomNonStreamLeader = %v (leader %v)", other, leader)
	}
	c.Shutdown(i)
	// The remaining two nodes elect a new stream leader.
	CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if l := c.StreamLeader("", "R3"); l == nil || l == leader {
			return errors.New("no new stream leader")
		}
		return nil
	})
	c.Restart(i)
	CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		n, err := msgs(ctx, js, "R3")
		if err != nil {
			return err
		}
		if n != 1 {
			return errors.New("message lost")
		}
		return nil
	})
}

func TestProcessKillRestartKeepsStream(t *testing.T) {
	p := StartProcess(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js := connect(t, p.URL())
	publishAndCount(ctx, t, js, "P", 1)
	p.Kill()
	if err := p.ping(); err == nil {
		t.Fatal("server still answers after Kill")
	}
	p.Restart()
	CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		n, err := msgs(ctx, js, "P")
		if err != nil {
			return err
		}
		if n != 1 {
			return errors.New("message lost across restart")
		}
		return nil
	})
}

func TestCheckForFails(t *testing.T) {
	ft := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		CheckFor(ft, 30*time.Millisecond, 5*time.Millisecond, func() error { return errors.New("never") })
	}()
	<-done
	if !ft.failed {
		t.Fatal("CheckFor did not fail the test")
	}
}

// fakeTB records Fatalf instead of stopping the real test.
type fakeTB struct {
	testing.TB
	failed bool
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(string, ...any) {
	f.failed = true
	runtime.Goexit()
}
