package jetstream

import (
	"context"
	"errors"
	"fmt"
	"sync"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/consumer"
)

// CacheStore is the cache bucket (EMBED_CACHE by default) as the job
// loop's [consumer.Cache]: a JetStream KV bucket of per-text results that
// the whole fleet shares (serve --cache kv). `jetembed provision` creates
// it with a TTL and a byte cap; the loop checks every value it reads, so
// what the bucket holds is trusted for nothing but a hint. A bucket that
// cannot be opened (deleted, not provisioned yet) fails each call, and is
// opened again on a later one: the loop computes the texts meanwhile.
type CacheStore struct {
	js       natsjs.JetStream
	bucket   string
	mu       sync.Mutex
	kv       natsjs.KeyValue
	maxValue int
}

var _ consumer.Cache = (*CacheStore)(nil)

// OpenCache opens the cache bucket (default EMBED_CACHE). It fails when
// the bucket cannot be opened now; [NewCache] does not.
func OpenCache(ctx context.Context, js natsjs.JetStream, bucket string) (*CacheStore, error) {
	s := NewCache(js, bucket)
	if _, err := s.open(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// NewCache returns the cache bucket (default EMBED_CACHE) as a
// [consumer.Cache], opened on its first call.
func NewCache(js natsjs.JetStream, bucket string) *CacheStore {
	if bucket == "" {
		bucket = DefaultConfig().Cache.Name
	}
	return &CacheStore{js: js, bucket: bucket}
}

// open returns the bucket, opening it the first time (and after a failed
// open).
func (s *CacheStore) open(ctx context.Context) (natsjs.KeyValue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kv != nil {
		return s.kv, nil
	}
	kv, err := s.js.KeyValue(ctx, s.bucket)
	if err != nil {
		return nil, fmt.Errorf("cache: bucket %s: %w (create it with `jetembed provision`, or serve with --cache off)", s.bucket, err)
	}
	if st, err := kv.Status(ctx); err == nil {
		if bs, ok := st.(*natsjs.KeyValueBucketStatus); ok && bs.StreamInfo() != nil {
			if n := bs.StreamInfo().Config.MaxMsgSize; n > 0 {
				s.maxValue = int(n)
			}
		}
	}
	s.kv = kv
	return kv, nil
}

// Get implements [consumer.Cache]: a key the bucket does not have (never
// stored, expired, evicted, purged) is nil and no error.
func (s *CacheStore) Get(ctx context.Context, key string) ([]byte, error) {
	kv, err := s.open(ctx)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, key)
	switch {
	case errors.Is(err, natsjs.ErrKeyNotFound), errors.Is(err, natsjs.ErrKeyDeleted):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return e.Value(), nil
}

// Put implements [consumer.Cache].
func (s *CacheStore) Put(ctx context.Context, key string, value []byte) error {
	kv, err := s.open(ctx)
	if err != nil {
		return err
	}
	_, err = kv.Put(ctx, key, value)
	return err
}

// MaxValueBytes is the bucket's largest value (its stream's max message
// size), 0 when it has none or is not open.
func (s *CacheStore) MaxValueBytes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxValue
}

// Bucket is the bucket's name.
func (s *CacheStore) Bucket() string { return s.bucket }

// cacheConfig is the cache bucket as nats.go creates a KV bucket; provision
// then makes its stream evict the oldest entries when full
// (cacheDiscard), which KeyValueConfig cannot say.
func (c Config) cacheConfig() natsjs.KeyValueConfig {
	return natsjs.KeyValueConfig{
		Bucket:       c.Cache.Name,
		Description:  "jetembed: the fleet's cache of per-text results (serve --cache kv)",
		History:      1,
		TTL:          c.Cache.TTL,
		MaxBytes:     capOrNone(c.Cache.MaxBytes),
		MaxValueSize: int32(capOrNone(int64(c.Cache.MaxValueBytes))),
		Storage:      natsjs.FileStorage,
		Replicas:     c.Replicas,
	}
}

// cacheDiscard: a full cache drops its oldest entries, so it keeps taking
// new ones (a KV bucket refuses new values when full).
const cacheDiscard = natsjs.DiscardOld

func capOrNone(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}

// ensureCache is ensureBucket for the cache bucket: its TTL, byte cap,
// value cap and discard policy are checked on the bucket's stream and
// updated there.
func ensureCache(ctx context.Context, js natsjs.JetStream, want natsjs.KeyValueConfig, o provisionOptions) ObjectOutcome {
	stream := "KV_" + want.Bucket
	s, err := js.Stream(ctx, stream)
	if errors.Is(err, natsjs.ErrStreamNotFound) {
		return created(ctx, "kv", want.Bucket, o, func(ctx context.Context) error {
			kv, err := js.CreateKeyValue(ctx, want)
			if err != nil {
				return err
			}
			st, err := kv.Status(ctx)
			if err != nil {
				return err
			}
			bs, ok := st.(*natsjs.KeyValueBucketStatus)
			if !ok {
				return fmt.Errorf("unexpected status type %T", st)
			}
			cfg := bs.StreamInfo().Config
			cfg.Discard = cacheDiscard
			_, err = js.UpdateStream(ctx, cfg)
			return err
		})
	}
	if err != nil {
		return failed("kv", want.Bucket, err)
	}
	have := s.CachedInfo().Config
	var d drift
	d.check("Storage", have.Storage, want.Storage, false)
	d.check("History", have.MaxMsgsPerSubject, int64(want.History), true)
	d.check("TTL", have.MaxAge, want.TTL, true)
	d.check("MaxBytes", have.MaxBytes, want.MaxBytes, true)
	d.check("MaxValueSize", have.MaxMsgSize, want.MaxValueSize, true)
	d.check("Discard", have.Discard, cacheDiscard, true)
	d.checkDown("Replicas", have.Replicas, want.Replicas, want.Replicas < have.Replicas)
	return d.outcome(ctx, "kv", want.Bucket, o, func(ctx context.Context) error {
		upd := have
		upd.MaxMsgsPerSubject, upd.MaxAge, upd.MaxBytes = int64(want.History), want.TTL, want.MaxBytes
		upd.MaxMsgSize, upd.Discard, upd.Replicas = want.MaxValueSize, cacheDiscard, want.Replicas
		_, err := js.UpdateStream(ctx, upd)
		return err
	})
}
