package jetstream

import (
	"bytes"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/internal/natstest"
)

// TestCacheBucket: provision makes the cache bucket with its caps and an
// evicting discard policy; the store answers a missing key with nil, a
// stored one with its bytes; a deleted bucket fails each call (the loop
// computes meanwhile) and works again once provision made it anew.
func TestCacheBucket(t *testing.T) {
	s := natstest.RunServer(t)
	ctx := testCtx(t, 30*time.Second)
	js := newJS(t, s.ClientURL())
	cfg := DefaultConfig()
	cfg.Cache.MaxBytes, cfg.Cache.MaxValueBytes = 64<<20, 4096
	if r, err := Provision(ctx, js, cfg); err != nil {
		t.Fatalf("%v\n%s", err, r)
	}
	info, err := js.Stream(ctx, "KV_"+cfg.Cache.Name)
	if err != nil {
		t.Fatal(err)
	}
	sc := info.CachedInfo().Config
	if sc.Discard != natsjs.DiscardOld || sc.MaxBytes != 64<<20 || sc.MaxMsgSize != 4096 || sc.MaxAge != DefaultCacheTTL || sc.MaxMsgsPerSubject != 1 {
		t.Errorf("cache stream config %+v", sc)
	}
	c, err := OpenCache(ctx, js, cfg.Cache.Name)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxValueBytes() != 4096 {
		t.Errorf("max value %d, want 4096", c.MaxValueBytes())
	}
	if v, err := c.Get(ctx, "absent"); v != nil || err != nil {
		t.Errorf("absent key: %q %v", v, err)
	}
	if err := c.Put(ctx, "k", []byte("value")); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "k"); !bytes.Equal(v, []byte("value")) || err != nil {
		t.Errorf("stored key: %q %v", v, err)
	}
	if err := c.Put(ctx, "big", make([]byte, 5000)); err == nil {
		t.Error("the bucket took a value over its cap")
	}
	if err := js.DeleteKeyValue(ctx, cfg.Cache.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "k"); err == nil {
		t.Error("a deleted bucket answered")
	}
	if err := c.Put(ctx, "k", []byte("v")); err == nil {
		t.Error("a deleted bucket took a value")
	}
	if r, err := Provision(ctx, js, cfg); err != nil {
		t.Fatalf("%v\n%s", err, r)
	}
	if err := c.Put(ctx, "k2", []byte("again")); err != nil {
		t.Fatalf("after provision made it anew: %v", err)
	}
	if v, err := c.Get(ctx, "k2"); !bytes.Equal(v, []byte("again")) || err != nil {
		t.Errorf("after provision: %q %v", v, err)
	}
	// A second provision finds nothing to change.
	r, err := Provision(ctx, js, cfg)
	if err != nil || r.Changed() {
		t.Errorf("re-run: %v\n%s", err, r)
	}
}
