package consumer

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetembed/jetembed/engine"
)

// Cache is the fleet's store of per-text results (serve --cache kv), keyed
// by a digest of the model, precision, tenant, outputs, truncation and
// text. Package jetstream's KV bucket (EMBED_CACHE) implements it. The
// loop looks a job's texts up before the engine (only the misses run) and
// stores what the engine computed. Whatever a Cache returns is checked
// (version, checksum, the key it was stored under, size): a value that
// fails is a miss, never an answer.
type Cache interface {
	// Get returns the value stored under key, or nil and no error when
	// there is none.
	Get(ctx context.Context, key string) ([]byte, error)
	// Put stores value under key.
	Put(ctx context.Context, key string, value []byte) error
}

// CacheMetrics is what the loop records of its cache, when [Config.Metrics]
// has these methods too (jetembed's own do).
type CacheMetrics interface {
	// CacheHits counts n texts answered from the cache.
	CacheHits(ctx context.Context, n int)
	// CacheMisses counts n texts the cache did not answer, by reason:
	// absent, corrupt, foreign, oversized or unavailable.
	CacheMisses(ctx context.Context, reason string, n int)
	// CacheBytes counts bytes read from ("read") or written to ("write")
	// the cache.
	CacheBytes(ctx context.Context, op string, n int)
	// CacheErrors counts failed cache calls by op ("get", "put").
	CacheErrors(ctx context.Context, op string, n int)
}

// Defaults of the cache.
const (
	// DefaultCacheValueBytes is the largest value stored or accepted: the
	// default max payload of nats-server (a result with ColBERT vectors of
	// a few hundred tokens does not fit, and is computed every time).
	DefaultCacheValueBytes = 1 << 20
	// cacheParallel bounds a job's concurrent cache calls.
	cacheParallel = 16
	// cacheTimeout bounds a job's lookups, and its stores: a slow cache
	// costs a job at most this, then its texts are computed.
	cacheTimeout = 2 * time.Second
	// cacheRetry is how long the loop leaves a failing cache alone (its
	// texts are computed meanwhile) before it asks again.
	cacheRetry = 5 * time.Second
	// cacheWarnEvery spaces the warnings of a failing cache.
	cacheWarnEvery = time.Minute
)

// cacheState is the loop's side of the cache: running totals, and when the
// cache last failed.
type cacheState struct {
	hits, hitTokens atomic.Uint64
	downUntil       atomic.Int64 // unix nanoseconds
	warned          atomic.Int64 // unix nanoseconds of the last warning
}

// CacheStats are running totals of the cache since start.
type CacheStats struct {
	// Texts and Tokens count the texts answered from the cache and their
	// real tokens: they are in [Stats] too (texts answered, tokens of the
	// answers), and in each result's usage (Cached, CachedTokens).
	Texts, Tokens uint64
}

// CacheStats returns the cache's running totals; zero with no cache.
func (c *Loop) CacheStats() CacheStats {
	return CacheStats{Texts: c.cache.hits.Load(), Tokens: c.cache.hitTokens.Load()}
}

// textFrom says where a text's embedding came from.
type textFrom uint8

const (
	fromRun   textFrom = iota // a session run
	fromCache                 // the fleet's cache
	fromTwin                  // an identical text of the same job, or of one in flight
)

// lookup asks the cache for the unique texts, fills embs and from for the
// hits and returns the misses, in order.
func (c *Loop) lookup(ctx context.Context, jobID string, texts []engine.Text, unique []int, keys []cacheKey, embs []engine.Embedding, from []textFrom) []int {
	cm, _ := c.cfg.Metrics.(CacheMetrics)
	if until := c.cache.downUntil.Load(); until != 0 && c.cfg.Now().UnixNano() < until {
		if cm != nil {
			cm.CacheMisses(ctx, missUnavailable, len(unique))
		}
		return unique
	}
	ctx, cancel := context.WithTimeout(ctx, cacheTimeout)
	defer cancel()
	reasons := make([]string, len(texts))
	var (
		read   atomic.Int64
		failed atomic.Int64
		lastMu sync.Mutex
		last   error
	)
	fanOut(unique, func(k int) {
		data, err := c.cfg.Cache.Get(ctx, keys[k].String())
		switch {
		case err != nil:
			failed.Add(1)
			lastMu.Lock()
			last = err
			lastMu.Unlock()
			reasons[k] = missUnavailable
			return
		case data == nil:
			reasons[k] = missAbsent
			return
		}
		read.Add(int64(len(data)))
		e, why := decodeValue(keys[k], data, texts[k].Outputs, c.cacheValueBytes())
		if why == "" && !plausible(&e, len(texts[k].Text), c.maxTokens) {
			why = missCorrupt
		}
		if why != "" {
			reasons[k] = why
			return
		}
		embs[k], from[k] = e, fromCache
	})
	if failed.Load() > 0 {
		c.cacheFailed("lookup", last)
	}
	var miss []int
	hits := 0
	counts := map[string]int{}
	for _, k := range unique {
		if from[k] == fromCache {
			hits++
			continue
		}
		miss = append(miss, k)
		counts[reasons[k]]++
		if r := reasons[k]; r == missCorrupt || r == missForeign || r == missOversized {
			c.cfg.Logger.Debug("cache value refused: the text is computed", "job", jobID, "reason", r)
		}
	}
	if cm != nil {
		if hits > 0 {
			cm.CacheHits(ctx, hits)
		}
		for r, n := range counts {
			cm.CacheMisses(ctx, r, n)
		}
		if b := read.Load(); b > 0 {
			cm.CacheBytes(ctx, "read", int(b))
		}
		if f := failed.Load(); f > 0 {
			cm.CacheErrors(ctx, "get", int(f))
		}
	}
	return miss
}

// store puts the computed embeddings of the texts run into the cache:
// those without an error whose value fits. A failure costs the cache an
// entry, never the job its result.
func (c *Loop) store(ctx context.Context, run []int, keys []cacheKey, embs []engine.Embedding) {
	if until := c.cache.downUntil.Load(); until != 0 && c.cfg.Now().UnixNano() < until {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cacheTimeout)
	defer cancel()
	limit := c.cacheValueBytes()
	var (
		wrote, failed atomic.Int64
		lastMu        sync.Mutex
		last          error
	)
	fanOut(run, func(k int) {
		e := &embs[k]
		if !cacheable(e) {
			return
		}
		v := encodeValue(keys[k], e)
		if len(v) > limit {
			return
		}
		if err := c.cfg.Cache.Put(ctx, keys[k].String(), v); err != nil {
			failed.Add(1)
			lastMu.Lock()
			last = err
			lastMu.Unlock()
			return
		}
		wrote.Add(int64(len(v)))
	})
	if failed.Load() > 0 {
		c.cacheFailed("store", last)
	}
	if cm, ok := c.cfg.Metrics.(CacheMetrics); ok {
		if b := wrote.Load(); b > 0 {
			cm.CacheBytes(ctx, "write", int(b))
		}
		if f := failed.Load(); f > 0 {
			cm.CacheErrors(ctx, "put", int(f))
		}
	}
}

// cacheFailed leaves the cache alone for [cacheRetry] and warns, at most
// once every [cacheWarnEvery]: its texts are computed meanwhile, and no
// job waits on a cache that does not answer.
func (c *Loop) cacheFailed(op string, err error) {
	now := c.cfg.Now()
	c.cache.downUntil.Store(now.Add(cacheRetry).UnixNano())
	last := c.cache.warned.Load()
	if last != 0 && now.UnixNano()-last < int64(cacheWarnEvery) {
		return
	}
	if c.cache.warned.CompareAndSwap(last, now.UnixNano()) {
		c.cfg.Logger.Warn("the result cache failed: texts are computed (and not stored) until it answers again (warned once a minute)",
			"op", op, "retry_in", cacheRetry.String(), "err", err)
	}
}

// cacheValueBytes is the largest cache value stored or accepted.
func (c *Loop) cacheValueBytes() int {
	if c.cfg.CacheValueBytes > 0 {
		return c.cfg.CacheValueBytes
	}
	return DefaultCacheValueBytes
}

// precisionOf is the precision the cache's keys name: the configured
// one, else the Embedder's when it says, else fp32 (the only one before
// int8).
func precisionOf(configured string, emb engine.Embedder) string {
	if configured != "" {
		return configured
	}
	if p, ok := emb.(interface{ Precision() string }); ok && p.Precision() != "" {
		return p.Precision()
	}
	return "fp32"
}

// errCount is the error of an Embedder that returned got embeddings for
// want texts.
func errCount(got, want int) error {
	return fmt.Errorf("consumer: embedder returned %d embeddings for %d texts", got, want)
}

// fanOut calls f for every index, at most [cacheParallel] at once.
func fanOut(idx []int, f func(int)) {
	if len(idx) == 1 {
		f(idx[0])
		return
	}
	sem := make(chan struct{}, cacheParallel)
	var wg sync.WaitGroup
	for _, k := range idx {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(k)
		})
	}
	wg.Wait()
}
