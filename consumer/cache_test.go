package consumer

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/schema"
)

// memCache is a Cache in a map; fail makes every call fail.
type memCache struct {
	mu         sync.Mutex
	m          map[string][]byte
	gets, puts int
	fail       error
}

func newMemCache() *memCache { return &memCache{m: map[string][]byte{}} }

func (c *memCache) Get(_ context.Context, key string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gets++
	if c.fail != nil {
		return nil, c.fail
	}
	return bytes.Clone(c.m[key]), nil
}

func (c *memCache) Put(_ context.Context, key string, value []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.puts++
	if c.fail != nil {
		return c.fail
	}
	c.m[key] = bytes.Clone(value)
	return nil
}

func (c *memCache) set(f func(m map[string][]byte)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c.m)
}

func (c *memCache) failWith(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fail = err
}

func (m *fakeMetrics) CacheHits(_ context.Context, n int) { m.add("cache hit", n) }
func (m *fakeMetrics) CacheMisses(_ context.Context, reason string, n int) {
	m.add("cache miss "+reason, n)
}
func (m *fakeMetrics) CacheBytes(_ context.Context, op string, n int) { m.add("cache bytes "+op, n) }
func (m *fakeMetrics) CacheErrors(_ context.Context, op string, n int) {
	m.add("cache error "+op, n)
}

var _ CacheMetrics = (*fakeMetrics)(nil)

// embedded counts the texts the fake embedder was given, over all calls.
func embedded(f *fakeEmb) []string {
	var out []string
	for _, call := range f.Calls() {
		for _, t := range call {
			out = append(out, t.Text)
		}
	}
	return out
}

// itemBytes encodes a result's items alone: what a cached text must not
// change.
func itemBytes(t *testing.T, res *schema.Result, enc schema.Encoding) []byte {
	t.Helper()
	data, err := schema.EncodeResult(&schema.Result{V: 1, ID: "x", Items: res.Items}, enc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestCacheAnswersRepeats(t *testing.T) {
	cache := newMemCache()
	r := newRig(t, Config{Cache: cache}, nil, nil)
	texts := []string{"alpha", "beta", "gamma"}
	for _, enc := range []schema.Encoding{schema.EncodingMsgpack, schema.EncodingJSON} {
		j1 := schema.NewJob("first-"+enc.String(), texts...)
		j1.Outputs, j1.Reply = []schema.Output{schema.OutputDense, schema.OutputSparse, schema.OutputColBERT}, "r.x"
		if got := r.submit(t, j1, enc); !slices.Equal(got, []string{"ack"}) {
			t.Fatalf("first: %v", got)
		}
		before := len(embedded(r.emb))
		j2 := schema.NewJob("again-"+enc.String(), texts...)
		j2.Outputs, j2.Reply = j1.Outputs, "r.x"
		if got := r.submit(t, j2, enc); !slices.Equal(got, []string{"ack"}) {
			t.Fatalf("again: %v", got)
		}
		if n := len(embedded(r.emb)) - before; n != 0 {
			t.Errorf("%v: the repeat ran %d texts, want 0", enc, n)
		}
		res1, _ := r.resultFor(t, j1.ID)
		res2, _ := r.resultFor(t, j2.ID)
		if !bytes.Equal(itemBytes(t, res1, enc), itemBytes(t, res2, enc)) {
			t.Errorf("%v: cached items differ from computed ones", enc)
		}
		if res2.Usage.Cached != 3 || res2.Usage.CachedTokens != res1.Usage.Tokens || res2.Usage.Tokens != res1.Usage.Tokens || res2.Usage.PaddedTokens != 0 {
			t.Errorf("%v: usage %+v after %+v, want every text and token cached, none padded", enc, res2.Usage, res1.Usage)
		}
		if (res1.Usage.Cached != 0) != (enc == schema.EncodingJSON) {
			t.Errorf("first run's usage %+v counts cached texts", res1.Usage)
		}
	}
	// The JSON jobs' first run is answered from the msgpack ones': the
	// encoding is not in the key.
	if st := r.c.CacheStats(); st.Texts != 9 {
		t.Errorf("cache stats %+v, want 9 texts", st)
	}
	if r.met.get("cache hit") != 9 || r.met.get("cache miss absent") != 3 || r.met.get("cache bytes write") == 0 || r.met.get("cache bytes read") == 0 {
		t.Errorf("metrics: %v", r.met)
	}
}

// TestCacheScopes: a text cached for one tenant, outputs or truncation is
// computed again for another.
func TestCacheScopes(t *testing.T) {
	cache := newMemCache()
	r := newRig(t, Config{Cache: cache}, nil, nil)
	j := schema.NewJob("a", "same text")
	j.Reply = "r.x"
	r.submit(t, j, schema.EncodingMsgpack)

	other := schema.NewJob("b", "same text")
	other.Reply = "r.x"
	d, m := delivery(t, other, schema.EncodingMsgpack, 1)
	d.Subject = "embed.jobs.u"
	if err := r.c.Submit(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	m.wait(t)

	sparse := schema.NewJob("c", "same text")
	sparse.Reply, sparse.Outputs = "r.x", []schema.Output{schema.OutputSparse}
	r.submit(t, sparse, schema.EncodingMsgpack)

	noCut := schema.NewJob("d", "same text")
	f := false
	noCut.Reply, noCut.Truncate = "r.x", &f
	r.submit(t, noCut, schema.EncodingMsgpack)

	if got := embedded(r.emb); len(got) != 4 {
		t.Errorf("ran %q, want the text once per tenant, outputs and truncation", got)
	}
	if len(cache.m) != 4 {
		t.Errorf("%d cache entries, want 4", len(cache.m))
	}
}

// TestCacheScopesModelFiles: a loop whose model has another
// fingerprint (Config.CacheModel: a tokenizer or head changed under the
// same graph) does not answer from the first one's entries.
func TestCacheScopesModelFiles(t *testing.T) {
	cache := newMemCache()
	for i, fp := range []string{"m@1+aaaa", "m@1+bbbb", "m@1+aaaa"} {
		r := newRig(t, Config{Cache: cache, CacheModel: fp}, nil, nil)
		j := schema.NewJob(fmt.Sprint("j", i), "same text")
		j.Reply = "r.x"
		r.submit(t, j, schema.EncodingMsgpack)
		want := 1
		if i == 2 { // the first fingerprint again: its entry answers
			want = 0
		}
		if got := embedded(r.emb); len(got) != want {
			t.Errorf("model %s: ran %q, want %d", fp, got, want)
		}
	}
	if len(cache.m) != 2 {
		t.Errorf("%d cache entries, want one a fingerprint", len(cache.m))
	}
}

// TestCacheTwins: identical texts of one job run once, and each gets the
// same item; they count their tokens but no padding.
func TestCacheTwins(t *testing.T) {
	for _, withCache := range []bool{false, true} {
		t.Run(fmt.Sprint("cache=", withCache), func(t *testing.T) {
			cfg := Config{}
			if withCache {
				cfg.Cache = newMemCache()
			}
			r := newRig(t, cfg, nil, nil)
			texts := []string{"boiler", "plate", "boiler", "x", "boiler", "plate"}
			j := schema.NewJob("twins", texts...)
			j.Reply = "r.x"
			r.submit(t, j, schema.EncodingMsgpack)
			if got := embedded(r.emb); !slices.Equal(got, []string{"boiler", "plate", "x"}) {
				t.Errorf("ran %q, want each distinct text once", got)
			}
			res, _ := r.resultFor(t, "twins")
			for i, text := range texts {
				if w := want(engine.Text{Text: text, Outputs: engine.Dense}); !slices.Equal(res.Items[i].Dense, w.Dense) {
					t.Errorf("item %d: %v, want %v", i, res.Items[i].Dense, w.Dense)
				}
			}
			wantTokens := 0
			for _, text := range texts {
				wantTokens += len(text) + 2
			}
			if res.Usage.Tokens != wantTokens || res.Usage.Cached != 0 {
				t.Errorf("usage %+v, want %d tokens, none cached", res.Usage, wantTokens)
			}
		})
	}
}

// TestCacheFailing: a cache that fails costs nothing but the cache: the
// jobs are computed and ACKed, a warning is logged, the failure counted,
// and the loop leaves the cache alone for a while.
func TestCacheFailing(t *testing.T) {
	cache := newMemCache()
	cache.failWith(errors.New("nats: no responders available for request"))
	// A clock that stands still: the cache stays left alone however slow
	// the machine.
	now := time.Now()
	r := newRig(t, Config{Cache: cache, Now: func() time.Time { return now }}, nil, nil)
	for i := range 3 {
		j := schema.NewJob(fmt.Sprint("j", i), "one", "two")
		j.Reply = "r.x"
		if got := r.submit(t, j, schema.EncodingMsgpack); !slices.Equal(got, []string{"ack"}) {
			t.Fatalf("job %d: %v", i, got)
		}
		if res, _ := r.resultFor(t, j.ID); res.Error != nil || len(res.Items) != 2 || res.Items[0].Dense == nil {
			t.Fatalf("job %d: %+v", i, res)
		}
	}
	if n := len(embedded(r.emb)); n != 6 {
		t.Errorf("ran %d texts, want all 6", n)
	}
	if cache.gets != 2 {
		t.Errorf("%d gets, want the first job's 2 and none while the cache is left alone", cache.gets)
	}
	if r.met.get("cache error get") != 2 || r.met.get("cache miss unavailable") != 6 {
		t.Errorf("metrics: %v", r.met)
	}
	if n := strings.Count(r.log.String(), "the result cache failed"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, r.log.String())
	}
}

// TestCacheBadValues: what the cache holds is hostile: garbage, a value
// of another key, one over the size cap, one damaged. Each is a miss (the
// text is computed, the answer correct), never an answer, and counted.
func TestCacheBadValues(t *testing.T) {
	cache := newMemCache()
	r := newRig(t, Config{Cache: cache, CacheValueBytes: 4096}, nil, nil)
	texts := []string{"garbage", "foreign", "oversized", "damaged"}
	j := schema.NewJob("seed", texts...)
	j.Reply = "r.x"
	r.submit(t, j, schema.EncodingMsgpack)
	seed, _ := r.resultFor(t, "seed")
	keys := map[string]string{}
	for _, text := range texts {
		keys[text] = makeCacheKey(r.c.model, "fp32", testTenant, engine.Dense, true, 0, text).String()
	}
	cache.set(func(m map[string][]byte) {
		if len(m) != 4 {
			t.Fatalf("%d entries, want 4", len(m))
		}
		m[keys["garbage"]] = []byte("JEC\x01 not a value at all")
		m[keys["foreign"]] = bytes.Clone(m[keys["damaged"]])
		m[keys["oversized"]] = bytes.Repeat([]byte{1}, 4097)
		d := m[keys["damaged"]]
		d[len(d)/2] ^= 0x40
	})
	before := len(embedded(r.emb))
	j2 := schema.NewJob("again", texts...)
	j2.Reply = "r.x"
	r.submit(t, j2, schema.EncodingMsgpack)
	if n := len(embedded(r.emb)) - before; n != 4 {
		t.Errorf("ran %d texts, want all 4 again", n)
	}
	again, _ := r.resultFor(t, "again")
	if !bytes.Equal(itemBytes(t, seed, schema.EncodingMsgpack), itemBytes(t, again, schema.EncodingMsgpack)) || again.Usage.Cached != 0 {
		t.Errorf("answers changed: %+v vs %+v", again.Items, seed.Items)
	}
	if r.met.get("cache miss corrupt") != 2 || r.met.get("cache miss foreign") != 1 || r.met.get("cache miss oversized") != 1 {
		t.Errorf("metrics: %v", r.met)
	}
	// The computed values replaced the bad ones: a third run is answered.
	before = len(embedded(r.emb))
	j3 := schema.NewJob("third", texts...)
	j3.Reply = "r.x"
	r.submit(t, j3, schema.EncodingMsgpack)
	if n := len(embedded(r.emb)) - before; n != 0 {
		t.Errorf("third run ran %d texts, want 0", n)
	}
}

// TestCacheForgedValues: a value that decodes (right key, right checksum:
// a checksum proves a value undamaged, not computed) but could not be this
// fleet's answer is computed again, never served or billed: NaN in a
// vector, a token count no text of its size has, a count over the model's
// without truncation, more ColBERT rows than tokens.
func TestCacheForgedValues(t *testing.T) {
	cache := newMemCache()
	r := newRig(t, Config{Cache: cache}, nil, nil)
	r.c.maxTokens = 32 // the fake engine says none; before the first job
	texts := []string{"nan", "billed", "over the model", "colbert rows"}
	// Dense and ColBERT, so that a value may carry ColBERT rows at all.
	outputs := []schema.Output{schema.OutputDense, schema.OutputColBERT}
	j := schema.NewJob("seed", texts...)
	j.Reply, j.Outputs = "r.x", outputs
	r.submit(t, j, schema.EncodingMsgpack)
	seed, _ := r.resultFor(t, "seed")
	keys := map[string]cacheKey{}
	for _, text := range texts {
		keys[text] = makeCacheKey(r.c.model, "fp32", testTenant, engine.Dense|engine.ColBERT, true, r.c.maxTokens, text)
	}
	forged := map[string]engine.Embedding{
		"nan":            {Dense: []float32{float32(math.NaN()), 1, 2}, Tokens: 3, ColBERT: []float32{1, 1}, ColBERTDim: 2},
		"billed":         {Dense: []float32{1, 0}, Tokens: 1<<32 - 1, Truncated: true, ColBERT: []float32{1, 1}, ColBERTDim: 2}, // truncated: only its text's size bounds it
		"over the model": {Dense: []float32{1, 0}, Tokens: 33, ColBERT: []float32{1, 1}, ColBERTDim: 2},                         // within 16 a byte, over the model's 32
		"colbert rows":   {Dense: []float32{1, 0}, Tokens: 3, ColBERT: make([]float32, 2*4), ColBERTDim: 2},
	}
	cache.set(func(m map[string][]byte) {
		if len(m) != len(texts) {
			t.Fatalf("%d entries, want %d", len(m), len(texts))
		}
		for text, e := range forged {
			if _, ok := m[keys[text].String()]; !ok {
				t.Fatalf("no entry of %q", text)
			}
			m[keys[text].String()] = encodeValue(keys[text], &e)
		}
	})
	before := len(embedded(r.emb))
	j2 := schema.NewJob("again", texts...)
	j2.Reply, j2.Outputs = "r.x", outputs
	r.submit(t, j2, schema.EncodingMsgpack)
	if n := len(embedded(r.emb)) - before; n != len(texts) {
		t.Errorf("ran %d texts, want all %d again", n, len(texts))
	}
	again, _ := r.resultFor(t, "again")
	if !bytes.Equal(itemBytes(t, seed, schema.EncodingMsgpack), itemBytes(t, again, schema.EncodingMsgpack)) || again.Usage.Cached != 0 || again.Usage.Tokens != seed.Usage.Tokens {
		t.Errorf("answers or usage changed: %+v (usage %+v) vs %+v (usage %+v)", again.Items, again.Usage, seed.Items, seed.Usage)
	}
	if r.met.get("cache miss corrupt") != len(texts) {
		t.Errorf("metrics: %v", r.met)
	}
}

func TestCacheValueCodec(t *testing.T) {
	all := engine.Dense | engine.Sparse | engine.ColBERT
	k := makeCacheKey("m@1", "fp32", "t", all, true, 8192, "text")
	e := engine.Embedding{Dense: []float32{1, -0, 3.5}, SparseIDs: []uint32{2, 9}, SparseWeights: []float32{0.5, 0.25},
		ColBERT: []float32{1, 2, 3, 4}, ColBERTDim: 2, Tokens: 9000, Truncated: true}
	v := encodeValue(k, &e)
	got, why := decodeValue(k, v, all, 0)
	if why != "" {
		t.Fatalf("decode: %s", why)
	}
	if !slices.Equal(got.Dense, e.Dense) || !slices.Equal(got.SparseIDs, e.SparseIDs) || !slices.Equal(got.SparseWeights, e.SparseWeights) ||
		!slices.Equal(got.ColBERT, e.ColBERT) || got.ColBERTDim != 2 || got.Tokens != 9000 || !got.Truncated {
		t.Errorf("decoded %+v, want %+v", got, e)
	}
	// reseal recomputes the checksum, so that only the check under test
	// can refuse the value.
	reseal := func(b []byte) []byte {
		body := b[:len(b)-4]
		return binary.LittleEndian.AppendUint32(bytes.Clone(body), crc32.Checksum(body, castagnoli))
	}
	mut := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(v)) }
	off := valueHeader // the dense length
	tests := []struct {
		name string
		data []byte
		want engine.Output
		why  string
	}{
		{"empty", nil, all, missCorrupt},
		{"short", v[:10], all, missCorrupt},
		{"bit flip", mut(func(b []byte) []byte { b[off+5] ^= 1; return b }), all, missCorrupt},
		{"truncated", v[:len(v)-1], all, missCorrupt},
		{"appended", append(bytes.Clone(v), 0), all, missCorrupt},
		{"version 2", mut(func(b []byte) []byte { b[3] = 2; return reseal(b) }), all, missCorrupt},
		{"other key", encodeValue(makeCacheKey("m@2", "fp32", "t", all, true, 8192, "text"), &e), all, missForeign},
		{"other precision", encodeValue(makeCacheKey("m@1", "int8", "t", all, true, 8192, "text"), &e), all, missForeign},
		{"oversized", v, all, missOversized},
		{"huge dense length", mut(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[off:], 1<<31)
			return reseal(b)
		}), all, missCorrupt},
		{"huge colbert", mut(func(b []byte) []byte {
			p := len(b) - 4 - 16 - 8
			binary.LittleEndian.PutUint32(b[p:], 1<<30)
			binary.LittleEndian.PutUint32(b[p+4:], 1<<30)
			return reseal(b)
		}), all, missCorrupt},
		{"unsorted sparse", mut(func(b []byte) []byte {
			p := off + 4 + 12 + 4
			binary.LittleEndian.PutUint32(b[p:], 10)
			return reseal(b)
		}), all, missCorrupt},
		{"unknown flag", mut(func(b []byte) []byte { b[4+32] |= 2; return reseal(b) }), all, missCorrupt},
		{"outputs differ", v, engine.Dense, missCorrupt},
	}
	for _, tt := range tests {
		limit := 0
		if tt.name == "oversized" {
			limit = len(v) - 1
		}
		if _, why := decodeValue(k, tt.data, tt.want, limit); why != tt.why {
			t.Errorf("%s: %q, want %q", tt.name, why, tt.why)
		}
	}
}

func TestCacheKeyFields(t *testing.T) {
	base := makeCacheKey("m@1", "fp32", "t", engine.Dense, true, 512, "text")
	for name, k := range map[string]cacheKey{
		"model":     makeCacheKey("m@2", "fp32", "t", engine.Dense, true, 512, "text"),
		"precision": makeCacheKey("m@1", "int8", "t", engine.Dense, true, 512, "text"),
		"tenant":    makeCacheKey("m@1", "fp32", "u", engine.Dense, true, 512, "text"),
		"outputs":   makeCacheKey("m@1", "fp32", "t", engine.Sparse, true, 512, "text"),
		"truncate":  makeCacheKey("m@1", "fp32", "t", engine.Dense, false, 512, "text"),
		"max":       makeCacheKey("m@1", "fp32", "t", engine.Dense, true, 256, "text"),
		"text":      makeCacheKey("m@1", "fp32", "t", engine.Dense, true, 512, "text "),
		// Length prefixes: moving a byte from one field to the next is
		// another key.
		"boundary": makeCacheKey("m@1", "fp32", "", engine.Dense, true, 512, "ttext"),
	} {
		if k == base {
			t.Errorf("a different %s gives the same key", name)
		}
	}
	if s := base.String(); len(s) != 64 || strings.Trim(s, "0123456789abcdef") != "" {
		t.Errorf("key %q is not 64 hex digits", s)
	}
}

// FuzzCacheValue: no value read from the bucket panics the decoder or
// makes it allocate beyond its size, and whatever it accepts encodes back
// to the same bytes.
func FuzzCacheValue(f *testing.F) {
	all := engine.Dense | engine.Sparse | engine.ColBERT
	k := makeCacheKey("m@1", "fp32", "t", all, true, 0, "x")
	e := engine.Embedding{Dense: []float32{1, 2}, SparseIDs: []uint32{1}, SparseWeights: []float32{1}, ColBERT: []float32{1, 2}, ColBERTDim: 2, Tokens: 3}
	f.Add(encodeValue(k, &e))
	f.Add([]byte("JEC\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, why := decodeValue(k, data, all, 1<<20)
		if why != "" {
			return
		}
		if again := encodeValue(k, &got); !bytes.Equal(again, data) {
			t.Errorf("accepted a value that does not encode back to itself")
		}
	})
}

// TestCacheKeyStable: the cache's keys do not change between versions
// (a bucket filled by an earlier one is still read), whatever the code
// that computes them.
func TestCacheKeyStable(t *testing.T) {
	for _, c := range []struct {
		key  cacheKey
		want string
	}{
		{makeCacheKey("bge-m3@abc", "fp32", "acme", engine.Dense|engine.Sparse, true, 8192, "héllo wörld"), "b9fcd87524ba364b80560bd32225362adfb126ac1e06fdbfa55dd4bc10e87a43"},
		{makeCacheKey("", "", "", 0, false, 0, ""), "7f0a2a56400b1e8610beca441f04c28c476eb0636cbda606c5fff630a5f13884"},
		{makeCacheKey("m@1", "int8", "t", engine.Dense, false, -1, strings.Repeat("long text ", 10000)), makeCacheKey("m@1", "int8", "t", engine.Dense, false, 0, strings.Repeat("long text ", 10000)).String()},
	} {
		if got := c.key.String(); got != c.want {
			t.Errorf("key %s, want %s", got, c.want)
		}
	}
}

// TestCacheableFinite: an answer with a NaN or an infinity is not stored:
// every reader would refuse it (plausible) and it would be written again
// on every run, counted a corrupt miss each time.
func TestCacheableFinite(t *testing.T) {
	ok := engine.Embedding{Dense: []float32{1, 0}, Tokens: 3, SparseIDs: []uint32{5}, SparseWeights: []float32{0.5}, ColBERT: []float32{1, 1}, ColBERTDim: 2}
	if !cacheable(&ok) {
		t.Fatal("a finite answer is not cacheable")
	}
	inf := float32(math.Inf(1))
	for name, mut := range map[string]func(e *engine.Embedding){
		"dense NaN":    func(e *engine.Embedding) { e.Dense = []float32{float32(math.NaN()), 0} },
		"sparse +Inf":  func(e *engine.Embedding) { e.SparseWeights = []float32{inf} },
		"colbert -Inf": func(e *engine.Embedding) { e.ColBERT = []float32{1, -inf} },
	} {
		e := ok
		mut(&e)
		if cacheable(&e) {
			t.Errorf("%s: cacheable", name)
		}
	}
}
