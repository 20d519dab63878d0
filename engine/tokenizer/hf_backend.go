//go:build hftokenizers

package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	hf "github.com/daulet/tokenizers"
)

// HFTokenizer is the HuggingFace tokenizers library (Rust, linked through
// cgo as libtokenizers.a) behind the same API as [Tokenizer], for files the
// pure-Go implementation does not support. Build with -tags hftokenizers
// and the library on the linker path. Texts are passed as C strings, so a
// NUL character ends the text early.
type HFTokenizer struct {
	data      []byte // the file with its truncation removed
	full      *hf.Tokenizer
	maxTokens int
	vocab     int

	mu  sync.Mutex
	cut map[int]*hf.Tokenizer // one truncating instance per limit
}

var _ Backend = (*HFTokenizer)(nil)

// LoadHF reads a tokenizer.json with the HuggingFace library. Its
// truncation section becomes the default limit, as with [Load].
func LoadHF(path string) (*HFTokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	t := &HFTokenizer{cut: map[int]*hf.Tokenizer{}}
	if raw := doc["truncation"]; !isNull(raw) {
		var tr struct {
			MaxLength int    `json:"max_length"`
			Direction string `json:"direction"`
		}
		if err := json.Unmarshal(raw, &tr); err != nil {
			return nil, fmt.Errorf("tokenizer %s: truncation: %w", path, err)
		}
		if tr.Direction == "Left" {
			return nil, fmt.Errorf("%w: left truncation with the HF backend", ErrUnsupported)
		}
		t.maxTokens = tr.MaxLength
	}
	// Count needs the untruncated encoding, so the base instance has no
	// truncation; cut instances are made per limit when a text needs one.
	doc["truncation"] = json.RawMessage("null")
	doc["padding"] = json.RawMessage("null")
	if t.data, err = json.Marshal(doc); err != nil {
		return nil, err
	}
	if t.full, err = hf.FromBytes(t.data); err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	t.vocab = int(t.full.VocabSize())
	return t, nil
}

// Close frees the native tokenizers.
func (t *HFTokenizer) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.cut {
		c.Close()
	}
	clear(t.cut)
	return t.full.Close()
}

func (t *HFTokenizer) cutter(limit int) (*hf.Tokenizer, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.cut[limit]; ok {
		return c, nil
	}
	c, err := hf.FromBytesWithTruncation(t.data, uint32(limit), hf.TruncationDirectionRight)
	if err != nil {
		return nil, err
	}
	t.cut[limit] = c
	return c, nil
}

// Encode tokenizes one text like [Tokenizer.Encode].
// EncodeIDs is [Tokenizer.EncodeIDs] for the HuggingFace library.
func (t *HFTokenizer) EncodeIDs(text string, maxTokens int) ([]int32, int) {
	enc := t.Encode(text, Options{AddSpecialTokens: true, MaxTokens: maxTokens})
	return enc.IDs, enc.Count
}

func (t *HFTokenizer) Encode(text string, opt Options) Encoding {
	ids := t.full.EncodeWithOptions(text, opt.AddSpecialTokens).IDs
	enc := Encoding{Count: len(ids)}
	limit := opt.MaxTokens
	if limit == 0 {
		limit = t.maxTokens
	}
	if limit > 0 && len(ids) > limit {
		if c, err := t.cutter(limit); err == nil {
			ids = c.EncodeWithOptions(text, opt.AddSpecialTokens).IDs
		} else {
			ids = ids[:limit]
		}
	}
	enc.IDs = make([]int32, len(ids))
	for i, id := range ids {
		enc.IDs[i] = int32(id)
	}
	return enc
}

// EncodeBatch encodes texts in parallel over GOMAXPROCS goroutines.
func (t *HFTokenizer) EncodeBatch(texts []string, opt Options) []Encoding {
	out := make([]Encoding, len(texts))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(texts)) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(texts); i = int(next.Add(1)) - 1 {
				out[i] = t.Encode(texts[i], opt)
			}
		})
	}
	wg.Wait()
	return out
}

// VocabSize is the vocabulary size including added tokens.
func (t *HFTokenizer) VocabSize() int { return t.vocab }

// MaxTokens is the default truncation length from the file, 0 for none.
func (t *HFTokenizer) MaxTokens() int { return t.maxTokens }
