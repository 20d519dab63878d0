package jetstream

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetembed/jetembed/internal/natstest"
)

func TestProvisionCheckModeCreatesNothing(t *testing.T) {
	s := natstest.RunServer(t)
	ctx := testCtx(t, 20*time.Second)
	js := newJS(t, s.ClientURL())
	r, err := Provision(ctx, js, DefaultConfig(), WithMode(ModeCheck))
	if !errors.Is(err, ErrMissing) {
		t.Fatalf("err = %v, want ErrMissing", err)
	}
	wantActions(t, r, Missing)
	for _, want := range []string{"stream EMBED_JOBS", "stream EMBED_DLQ", "consumer EMBED_JOBS/embedder", "kv EMBED_ENGINES"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q: %v", want, err)
		}
	}
	if !strings.Contains(r.String(), "jetembed provision") {
		t.Errorf("report does not say how to create them:\n%s", r)
	}
	if names := js.StreamNames(ctx); names.Err() != nil {
		t.Fatal(names.Err())
	} else {
		for n := range names.Name() {
			t.Errorf("check mode created stream %s", n)
		}
	}
}

func TestProvisionCreateModeNeverUpdates(t *testing.T) {
	s := natstest.RunServer(t)
	ctx := testCtx(t, 20*time.Second)
	js := newJS(t, s.ClientURL())
	owner := DefaultConfig()
	owner.Jobs.MaxAge = 48 * time.Hour
	owner.Consumer.AckWait = 5 * time.Minute
	owner.Consumer.BackOff = nil
	owner.Consumer.MaxAckPending = 4096
	if _, err := Provision(ctx, js, owner); err != nil {
		t.Fatal(err)
	}
	// A process with default settings starts with create (and with check):
	// it reports the drift, field by field, and applies none of it.
	for _, mode := range []Mode{ModeCreate, ModeCheck} {
		r, err := Provision(ctx, js, DefaultConfig(), WithMode(mode))
		if err != nil {
			t.Fatalf("mode %d: %v\n%s", mode, err, r)
		}
		jobs, _ := r.Find("stream", "EMBED_JOBS")
		cons, _ := r.Find("consumer", "EMBED_JOBS/embedder")
		if jobs.Action != Drifted || strings.Join(jobs.Fields(), " ") != "MaxAge" {
			t.Errorf("mode %d: jobs stream %v %v, want drifted [MaxAge]", mode, jobs.Action, jobs.Fields())
		}
		if cons.Action != Drifted || strings.Join(cons.Fields(), " ") != "AckWait BackOff MaxAckPending" {
			t.Errorf("mode %d: consumer %v %v, want drifted [AckWait BackOff MaxAckPending]", mode, cons.Action, cons.Fields())
		}
		if r.Changed() || len(r.Drift()) != 2 {
			t.Errorf("mode %d: changed=%v drift=%d:\n%s", mode, r.Changed(), len(r.Drift()), r)
		}
	}
	// With ServerTuning the consumer's own settings are not compared.
	r, err := Provision(ctx, js, DefaultConfig(), WithMode(ModeCreate), ServerTuning())
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := r.Find("consumer", "EMBED_JOBS/embedder"); o.Action != Unchanged {
		t.Errorf("consumer with ServerTuning: %v %v, want unchanged", o.Action, o.Fields())
	}
	jobs, _ := js.Stream(ctx, "EMBED_JOBS")
	c, _ := js.Consumer(ctx, "EMBED_JOBS", "embedder")
	if jobs.CachedInfo().Config.MaxAge != 48*time.Hour || c.CachedInfo().Config.AckWait != 5*time.Minute || c.CachedInfo().Config.MaxAckPending != 4096 {
		t.Errorf("create mode changed the server: MaxAge %v AckWait %v MaxAckPending %d",
			jobs.CachedInfo().Config.MaxAge, c.CachedInfo().Config.AckWait, c.CachedInfo().Config.MaxAckPending)
	}
}

func TestProvisionDryRun(t *testing.T) {
	s := natstest.RunServer(t)
	ctx := testCtx(t, 20*time.Second)
	js := newJS(t, s.ClientURL())
	r, err := Provision(ctx, js, DefaultConfig(), DryRun())
	if err != nil {
		t.Fatal(err)
	}
	wantActions(t, r, Created)
	if !strings.Contains(r.String(), "would be created") {
		t.Errorf("dry run report:\n%s", r)
	}
	if _, err := js.Stream(ctx, "EMBED_JOBS"); err == nil {
		t.Fatal("dry run created EMBED_JOBS")
	}
	if _, err := Provision(ctx, js, DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Jobs.MaxAge = time.Hour
	r, err = Provision(ctx, js, cfg, DryRun())
	if o, _ := r.Find("stream", "EMBED_JOBS"); err != nil || o.Action != Updated || !strings.Contains(r.String(), "would be updated MaxAge") {
		t.Fatalf("dry run update: %v\n%s", err, r)
	}
	if jobs, _ := js.Stream(ctx, "EMBED_JOBS"); jobs.CachedInfo().Config.MaxAge == time.Hour {
		t.Error("dry run updated EMBED_JOBS")
	}
}

func TestProvisionRefusesRemovingSubjects(t *testing.T) {
	s := natstest.RunServer(t)
	ctx := testCtx(t, 20*time.Second)
	js := newJS(t, s.ClientURL())
	if _, err := Provision(ctx, js, DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.CaptureMaxDeliveries = false // drops the advisory subject from the DLQ
	r, err := Provision(ctx, js, cfg)
	if !errors.Is(err, ErrDowngrade) {
		t.Fatalf("err = %v, want ErrDowngrade\n%s", err, r)
	}
	if o, _ := r.Find("stream", "EMBED_DLQ"); o.Action != Refused || !strings.Contains(r.String(), "--allow-downgrade") {
		t.Errorf("dlq: %v\n%s", o.Action, r)
	}
	if r, err := Provision(ctx, js, cfg, AllowDowngrade()); err != nil {
		t.Fatalf("with AllowDowngrade: %v\n%s", err, r)
	} else if o, _ := r.Find("stream", "EMBED_DLQ"); o.Action != Updated {
		t.Errorf("dlq with AllowDowngrade: %v", o.Action)
	}
}

func TestProvisionClusterRefusesFewerReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := natstest.RunCluster(t, 3)
	ctx := testCtx(t, 60*time.Second)
	js := newJS(t, c.URLs())
	cfg := DefaultConfig()
	cfg.Replicas = 3
	if r, err := Provision(ctx, js, cfg); err != nil {
		t.Fatalf("%v\n%s", err, r)
	}
	r, err := Provision(ctx, js, DefaultConfig())
	if !errors.Is(err, ErrDowngrade) {
		t.Fatalf("R3 -> R1 without AllowDowngrade: err = %v\n%s", err, r)
	}
	for _, o := range r.Outcomes {
		if o.Kind != "consumer" && (o.Action != Refused || strings.Join(o.Fields(), " ") != "Replicas") {
			t.Errorf("%s %s: %v %v, want refused [Replicas]", o.Kind, o.Name, o.Action, o.Fields())
		}
	}
	for _, name := range []string{"EMBED_JOBS", "EMBED_RESULTS", "EMBED_DLQ", "KV_EMBED_ENGINES"} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if n := s.CachedInfo().Config.Replicas; n != 3 {
			t.Errorf("%s: replicas %d, want 3", name, n)
		}
	}
}
