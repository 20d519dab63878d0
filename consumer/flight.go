package consumer

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"sync"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/schema"
)

// A text's identity (the key of the cache and of the flights), and compute
// once across jobs: a text in flight for one job (the same key as
// the cache's: model, precision, tenant, outputs, truncation and text) is
// not run again for another job that holds it at the same time; that job
// waits for the first one's answer. The tenant is in the key, so no
// tenant waits on (or learns the timing of) another's texts.
//
// Order closes the gap with the cache: a job claims its texts here before
// it looks them up in the cache, and the job that ran a text stores it in
// the cache before it lands the flight. A text is therefore, at any
// moment, in flight (followed), in the cache (a hit), or neither (run).

// cacheKey is the digest of everything a text's result depends on: the
// model (name@sha), its precision, the tenant (no tenant reads, or times,
// another's entries), the outputs, the truncation (whether, and at how
// many tokens) and the text. Fields are length-prefixed, so no two
// different tuples share their bytes.
type cacheKey [sha256.Size]byte

// String is the KV key: the digest in hex.
func (k cacheKey) String() string { return hex.EncodeToString(k[:]) }

// makeCacheKey is computed for every text of every job (the flights need
// it even with the cache off), so it hashes one pooled buffer of the
// fields rather than streaming them through a hash.Hash (which took two
// allocations a field). The bytes, and so the keys of entries already in
// a cache bucket, are the same (TestCacheKeyStable).
func makeCacheKey(model, precision, tenant string, out engine.Output, truncate bool, maxTokens int, text string) cacheKey {
	bp := keyBufs.Get().(*[]byte)
	b := (*bp)[:0]
	for _, s := range [...]string{"jetembed/cache/v1", model, precision, tenant} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	flags := byte(0)
	if truncate {
		flags = 1
	}
	b = append(b, byte(out), flags)
	b = binary.AppendUvarint(b, uint64(max(maxTokens, 0)))
	b = binary.AppendUvarint(b, uint64(len(text)))
	b = append(b, text...)
	k := cacheKey(sha256.Sum256(b))
	if cap(b) <= maxKeyBuf {
		*bp = b
		keyBufs.Put(bp)
	}
	return k
}

// keyBufs hold makeCacheKey's buffers; one grown past maxKeyBuf (a long
// text) is left to the collector.
var keyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

const maxKeyBuf = 64 << 10

// flight is one text being computed for the job that claimed it.
type flight struct {
	// done is closed when landed. It is made by the first job that
	// follows the flight (under the board's lock, before land can run):
	// most texts are followed by none, and a channel a text was an
	// allocation a text.
	done chan struct{}
	// Set before done is closed. ok: emb is the text's answer (a
	// retriable failure is not: a follower runs the text itself);
	// cached: it came from the cache.
	emb        engine.Embedding
	ok, cached bool
	// interactive: the job that claimed it runs in the interactive
	// class. An interactive job does not follow a bulk one's text: it
	// would wait out the bulk queue (and its budget), past its own wait
	// and deadline; it runs the text itself, off the board.
	interactive bool
}

// flights is the loop's board of texts in flight, by key.
type flights struct {
	mu sync.Mutex
	m  map[cacheKey]*flight
}

// claim takes the texts unique (indexes of texts, with their keys) onto
// the board: the ones no other job has in flight are this job's to run
// (lead, and their flights in mine); the others are followed (theirs),
// but for an interactive job a bulk job's: those it runs too (lead, with
// no flight in mine). mine and theirs are aligned with the job's texts
// (n of them).
func (b *flights) claim(unique []int, keys []cacheKey, n int, interactive bool) (lead []int, mine, theirs []*flight) {
	both := make([]*flight, 2*n)
	mine, theirs = both[:n:n], both[n:]
	// One allocation for the job's flights (a followed text leaves its
	// slot unused).
	slab := make([]flight, len(unique))
	lead = make([]int, 0, len(unique))
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = make(map[cacheKey]*flight)
	}
	for _, k := range unique {
		if f, ok := b.m[keys[k]]; ok {
			if interactive && !f.interactive {
				lead = append(lead, k)
				continue
			}
			if f.done == nil {
				f.done = make(chan struct{})
			}
			theirs[k] = f
			continue
		}
		f := &slab[len(lead)]
		f.interactive = interactive
		b.m[keys[k]] = f
		mine[k] = f
		lead = append(lead, k)
	}
	return lead, mine, theirs
}

// land answers the followers of f (the flight of key) and takes it off the
// board. It is called once per claimed flight; ok false sends them to run
// the text themselves.
func (b *flights) land(key cacheKey, f *flight, emb engine.Embedding, ok, cached bool) {
	if ok && emb.Err != nil && !shareable(emb.Err) {
		ok = false
	}
	b.mu.Lock()
	if b.m[key] == f {
		delete(b.m, key)
	}
	// Off the board no job can follow it any more: done is what it is
	// (nil when none did), and the answer is set before it is closed.
	done := f.done
	b.mu.Unlock()
	f.emb, f.ok, f.cached = emb, ok, cached
	if done != nil {
		close(done)
	}
}

// shareable reports whether a text's item error is the text's own, and
// so every job's that holds it: not a retriable refusal, not
// deadline_exceeded, which the engine answers for the texts of a call
// whose context ended (the leader left the queue, or the process stops),
// and not internal, a fault of the leader's run rather than of the text.
func shareable(err *schema.Error) bool {
	return !err.Retriable && !err.Code.Retriable() && err.Code != schema.CodeDeadlineExceeded && err.Code != schema.CodeInternal
}

// inFlight is how many texts are on the board (tests).
func (b *flights) inFlight() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.m)
}
