package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/internal/natstest"
)

func TestProvisionCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := natstest.RunCluster(t, 3)
	ctx := testCtx(t, 40*time.Second)
	js := newJS(t, c.URLs())
	cfg := DefaultConfig()
	cfg.Replicas = 3
	r, err := Provision(ctx, js, cfg)
	if err != nil {
		t.Fatalf("Provision: %v\n%s", err, r)
	}
	wantActions(t, r, Created)
	for _, name := range []string{"EMBED_JOBS", "EMBED_RESULTS", "EMBED_DLQ", "KV_EMBED_ENGINES", "OBJ_EMBED_BLOBS"} {
		c.WaitOnStreamLeader("", name)
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		natstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
			info, err := s.Info(ctx)
			if err != nil {
				return err
			}
			if info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
				return fmt.Errorf("%s: replicas %d, cluster %+v", name, info.Config.Replicas, info.Cluster)
			}
			return nil
		})
	}
	r, err = Provision(ctx, js, cfg)
	if err != nil || r.Changed() {
		t.Fatalf("re-run in cluster: changed=%v err=%v\n%s", r.Changed(), err, r)
	}
}

func TestProvisionClusterScaleUp(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := natstest.RunCluster(t, 3)
	ctx := testCtx(t, 40*time.Second)
	js := newJS(t, c.URLs())
	cfg := DefaultConfig()
	if _, err := Provision(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Replicas = 3
	r, err := Provision(ctx, js, cfg)
	if err != nil {
		t.Fatalf("Provision R3: %v\n%s", err, r)
	}
	for _, o := range r.Outcomes {
		want, fields := Updated, "Replicas"
		if o.Kind == "consumer" {
			want, fields = Unchanged, "" // it follows its stream
		}
		if o.Action != want || strings.Join(o.Fields(), " ") != fields {
			t.Errorf("%s %s: %v %v, want %v [%s]", o.Kind, o.Name, o.Action, o.Fields(), want, fields)
		}
	}
	// The server has accepted the new replica count. Placing the new peers
	// takes nats-server about ten seconds more; that is its business, not
	// this test's.
	for _, name := range []string{"EMBED_JOBS", "KV_EMBED_ENGINES"} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if n := s.CachedInfo().Config.Replicas; n != 3 {
			t.Errorf("%s: replicas %d after the update, want 3", name, n)
		}
	}
	if r, err := Provision(ctx, js, cfg); err != nil || r.Changed() {
		t.Fatalf("re-run after scale-up: changed=%v err=%v\n%s", r.Changed(), err, r)
	}
}

func TestProvisionServerRefusal(t *testing.T) {
	s := natstest.RunServer(t)
	ctx := testCtx(t, 20*time.Second)
	js := newJS(t, s.ClientURL())
	cfg := DefaultConfig()
	cfg.Replicas = 3 // a single server cannot place three replicas
	r, err := Provision(ctx, js, cfg)
	t.Logf("report:\n%s", r)
	if err == nil || errors.Is(err, ErrDrift) {
		t.Fatalf("err = %v, want the server's refusal", err)
	}
	o, _ := r.Find("stream", "EMBED_JOBS")
	if o.Action != Failed || o.Err == nil || !strings.Contains(o.Err.Error(), "EMBED_JOBS") {
		t.Errorf("jobs stream: %v %v, want failed naming the stream", o.Action, o.Err)
	}
	if !strings.Contains(r.String(), "failed: ") {
		t.Errorf("report does not show the failure:\n%s", r)
	}
}

func TestProvisionInvalidConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Consumer.MaxAckPending = 0
	// Validation comes first: no server is needed to refuse this.
	if _, err := Provision(context.Background(), nil, cfg); !errors.Is(err, ErrConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
}

// TestProvisionBlobsBucket: the blobs Object Store gets the configured TTL
// and replicas, and a changed TTL is updated in place.
func TestProvisionBlobsBucket(t *testing.T) {
	s := natstest.RunServer(t)
	ctx := testCtx(t, 20*time.Second)
	js := newJS(t, s.ClientURL())
	cfg := DefaultConfig()
	if _, err := Provision(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(ctx, "EMBED_BLOBS")
	if err != nil {
		t.Fatal(err)
	}
	st, err := obs.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.TTL() != 24*time.Hour || st.Replicas() != 1 || st.Storage() != natsjs.FileStorage {
		t.Errorf("blobs bucket: ttl %v replicas %d storage %v", st.TTL(), st.Replicas(), st.Storage())
	}
	cfg.Blobs.TTL = time.Hour
	r, err := Provision(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := r.Find("objstore", "EMBED_BLOBS"); o.Action != Updated {
		t.Errorf("blobs bucket: %v, want updated\n%s", o.Action, r)
	}
	if st, _ = obs.Status(ctx); st.TTL() != time.Hour {
		t.Errorf("ttl after update %v", st.TTL())
	}
	// A size cap is applied in place too, and held by the server.
	cfg.Blobs.MaxBytes = 64 << 20
	if r, err = Provision(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	if o, _ := r.Find("objstore", "EMBED_BLOBS"); o.Action != Updated {
		t.Errorf("blobs bucket with a size cap: %v, want updated\n%s", o.Action, r)
	}
	if st, _ = obs.Status(ctx); st.(*natsjs.ObjectBucketStatus).StreamInfo().Config.MaxBytes != 64<<20 {
		t.Errorf("max bytes after update %d", st.(*natsjs.ObjectBucketStatus).StreamInfo().Config.MaxBytes)
	}
	if r, err = Provision(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	if o, _ := r.Find("objstore", "EMBED_BLOBS"); o.Action == Updated {
		t.Errorf("blobs bucket provisioned twice with one cap: updated again\n%s", r)
	}
	// 0 and -1 both mean no cap: lifting it once, then asking with the
	// other spelling, is no drift.
	for i, mb := range []int64{-1, 0} {
		cfg.Blobs.MaxBytes = mb
		if r, err = Provision(ctx, js, cfg); err != nil {
			t.Fatal(err)
		}
		if o, _ := r.Find("objstore", "EMBED_BLOBS"); (o.Action == Updated) != (i == 0) {
			t.Errorf("max bytes %d after a lifted cap: %v\n%s", mb, o.Action, r)
		}
	}
}
