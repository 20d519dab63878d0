package fleet

import (
	"context"
	"errors"
	"time"
)

// Store is what the fleet needs of the engines bucket: a key-value store
// with per-key TTLs, revisions and a watch. package jetstream's KVStore
// implements it over a JetStream KV bucket; the fleet knows nothing else
// of NATS.
type Store interface {
	// Create writes key only if it has no live value, with a per-key TTL
	// when ttl > 0, and returns the new revision. A live key is
	// [ErrExists].
	Create(ctx context.Context, key string, value []byte, ttl time.Duration) (uint64, error)
	// Update writes key only if its latest revision is rev, with a fresh
	// per-key TTL when ttl > 0 (a compile lock's renewal), and returns the
	// new revision. Another revision is [ErrRevision].
	Update(ctx context.Context, key string, value []byte, rev uint64, ttl time.Duration) (uint64, error)
	// Put writes key whatever it holds and returns the new revision.
	Put(ctx context.Context, key string, value []byte) (uint64, error)
	// Delete removes key; when rev > 0 only if its latest revision is rev
	// (else [ErrRevision]).
	Delete(ctx context.Context, key string, rev uint64) error
	// Get returns key's live value, or [ErrNotFound].
	Get(ctx context.Context, key string) (Entry, error)
	// Watch follows every key: the channel first yields the current
	// values, then one nil, then each change (deletes and expiries as
	// [OpDelete]) until ctx ends or the store is gone, when it is closed.
	Watch(ctx context.Context) (<-chan *Entry, error)
}

// Errors a [Store] returns, compared with errors.Is.
var (
	ErrExists   = errors.New("fleet store: key exists")
	ErrRevision = errors.New("fleet store: wrong revision")
	ErrNotFound = errors.New("fleet store: key not found")
)

// Op says whether an [Entry] is a value or the key's removal.
type Op uint8

// The operations of an [Entry].
const (
	OpPut Op = iota
	OpDelete
)

// Entry is one key of the store as a watch or a get sees it. Everything in
// it came from the network.
type Entry struct {
	Key      string
	Value    []byte
	Revision uint64
	Op       Op
	// Created is when the revision was written (the server's clock).
	Created time.Time
}
