package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/jetembed/jetembed/fleet"
)

// KVStore is the engines bucket as the fleet's [fleet.Store]: a JetStream
// KV bucket, reached through the JetStream context it was opened with (so
// through its domain or API prefix).
type KVStore struct {
	kv  natsjs.KeyValue
	js  natsjs.JetStream
	pre string // the subject prefix of the bucket's writes
}

var _ fleet.Store = (*KVStore)(nil)

// OpenKVStore opens the KV bucket (default EMBED_ENGINES) as a
// [fleet.Store].
func OpenKVStore(ctx context.Context, js natsjs.JetStream, bucket string) (*KVStore, error) {
	if bucket == "" {
		bucket = DefaultConfig().Engines.Name
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("fleet: bucket %s: %w", bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("fleet: bucket %s: %w", bucket, err)
	}
	return &KVStore{kv: kv, js: js, pre: kvWritePrefix(js, bucket, st)}, nil
}

// kvWritePrefix is the subject prefix nats.go's KeyValue writes a key
// under: "$KV.<bucket>." behind the JetStream context's domain or API
// prefix (the server maps "$JS.<domain>.API.$KV.>" to "$KV.>"), or the
// mirrored bucket's subjects. nats.go's Update takes no TTL, so a lock's
// renewal publishes there itself; this keeps it on the subject nats.go's
// own Create and Delete use.
func kvWritePrefix(js natsjs.JetStream, bucket string, st natsjs.KeyValueStatus) string {
	pre := "$KV." + bucket + "."
	if bs, ok := st.(*natsjs.KeyValueBucketStatus); ok {
		if m := bs.StreamInfo().Config.Mirror; m != nil {
			name := strings.TrimPrefix(m.Name, "KV_")
			if m.External != nil && m.External.APIPrefix != "" {
				return m.External.APIPrefix + ".$KV." + name + "."
			}
			pre = "$KV." + name + "."
		}
	}
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API." + pre
	case o.APIPrefix != "" && strings.TrimSuffix(o.APIPrefix, ".") != "$JS.API":
		return strings.TrimSuffix(o.APIPrefix, ".") + "." + pre
	}
	return pre
}

// Create implements [fleet.Store].
func (s *KVStore) Create(ctx context.Context, key string, value []byte, ttl time.Duration) (uint64, error) {
	var opts []natsjs.KVCreateOpt
	if ttl > 0 {
		opts = append(opts, natsjs.KeyTTL(ttl))
	}
	rev, err := s.kv.Create(ctx, key, value, opts...)
	return rev, storeErr(err, fleet.ErrExists)
}

// Update implements [fleet.Store]: a put expecting rev as the key's last
// revision, with a per-key TTL.
func (s *KVStore) Update(ctx context.Context, key string, value []byte, rev uint64, ttl time.Duration) (uint64, error) {
	if ttl <= 0 {
		next, err := s.kv.Update(ctx, key, value, rev)
		return next, storeErr(err, fleet.ErrRevision)
	}
	ack, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: s.pre + key, Data: value},
		natsjs.WithMsgTTL(ttl), natsjs.WithExpectLastSequencePerSubject(rev))
	if err != nil {
		return 0, storeErr(err, fleet.ErrRevision)
	}
	return ack.Sequence, nil
}

// Put implements [fleet.Store].
func (s *KVStore) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	rev, err := s.kv.Put(ctx, key, value)
	return rev, storeErr(err, nil)
}

// Delete implements [fleet.Store].
func (s *KVStore) Delete(ctx context.Context, key string, rev uint64) error {
	var opts []natsjs.KVDeleteOpt
	if rev > 0 {
		opts = append(opts, natsjs.LastRevision(rev))
	}
	return storeErr(s.kv.Delete(ctx, key, opts...), fleet.ErrRevision)
}

// Get implements [fleet.Store].
func (s *KVStore) Get(ctx context.Context, key string) (fleet.Entry, error) {
	e, err := s.kv.Get(ctx, key)
	if err != nil {
		return fleet.Entry{}, storeErr(err, nil)
	}
	return entry(e), nil
}

// Watch implements [fleet.Store].
func (s *KVStore) Watch(ctx context.Context) (<-chan *fleet.Entry, error) {
	w, err := s.kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("fleet: watch %s: %w", s.kv.Bucket(), err)
	}
	out := make(chan *fleet.Entry)
	go func() {
		defer close(out)
		defer func() { _ = w.Stop() }()
		for {
			var e natsjs.KeyValueEntry
			var ok bool
			select {
			case <-ctx.Done():
				return
			case e, ok = <-w.Updates():
				if !ok {
					return
				}
			}
			var fe *fleet.Entry
			if e != nil {
				v := entry(e)
				fe = &v
			}
			select {
			case out <- fe:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func entry(e natsjs.KeyValueEntry) fleet.Entry {
	op := fleet.OpPut
	if e.Operation() != natsjs.KeyValuePut {
		op = fleet.OpDelete
	}
	return fleet.Entry{Key: e.Key(), Value: e.Value(), Revision: e.Revision(), Op: op, Created: e.Created()}
}

// storeErr maps nats.go's KV errors to the [fleet.Store] sentinels,
// keeping the cause. A failed compare-and-set (the server's "wrong last
// sequence") is cas: [fleet.ErrExists] for a create, [fleet.ErrRevision]
// for a write at a revision.
func storeErr(err, cas error) error {
	var api *natsjs.APIError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, natsjs.ErrKeyNotFound), errors.Is(err, natsjs.ErrKeyDeleted):
		return fmt.Errorf("%w: %w", fleet.ErrNotFound, err)
	case cas != nil && (errors.Is(err, natsjs.ErrKeyExists) || errors.Is(err, natsjs.ErrKeyRevisionMismatch) ||
		errors.As(err, &api) && (api.ErrorCode == natsjs.JSErrCodeStreamWrongLastSequence ||
			api.ErrorCode == natsjs.JSErrCodeStreamWrongLastSequenceConstant)):
		return fmt.Errorf("%w: %w", cas, err)
	}
	return err
}

// Bucket is the bucket's name.
func (s *KVStore) Bucket() string { return s.kv.Bucket() }
