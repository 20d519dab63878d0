package tokenizer

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// Tokenizer turns text into token ids like HuggingFace tokenizers does with
// the same tokenizer.json. It is safe for concurrent use.
type Tokenizer struct {
	norm  normalizer
	pre   preTokenizer
	model model
	post  postProcessor

	// raw matches the added tokens with normalized=false on the original
	// text; normed those with normalized=true on normalized text.
	raw, normed *addedMatcher
	added       map[string]int32 // added token contents, for TokenToID
	maxID       int32

	maxTokens int
	truncLeft bool
	special   []int32
	pad       int32

	scratch sync.Pool // *scratch
}

// Backend is what both tokenizer implementations offer: the pure-Go
// [Tokenizer] and, with the hftokenizers build tag, [HFTokenizer] (the Rust
// HuggingFace library through github.com/daulet/tokenizers).
type Backend interface {
	Encode(text string, opt Options) Encoding
	EncodeBatch(texts []string, opt Options) []Encoding
	VocabSize() int
	MaxTokens() int
}

var _ Backend = (*Tokenizer)(nil)

// Options tune one encoding.
type Options struct {
	// AddSpecialTokens applies the post-processor (e.g. <s> ... </s>).
	AddSpecialTokens bool
	// MaxTokens cuts the encoding to at most this many tokens, special tokens
	// included (as HF's max_length). 0 means the tokenizer's default
	// ([Tokenizer.MaxTokens]); a negative value means no limit.
	MaxTokens int
}

// Encoding is the result for one text.
type Encoding struct {
	IDs []int32
	// Count is the number of tokens before truncation, special tokens
	// included; Count > len(IDs) means the text was cut.
	Count int
}

// scratch holds the per-encode buffers reused across calls.
type scratch struct {
	segs, inner []segment
	words       []string
	ids         []int32
}

func (t *Tokenizer) setAddedTokens(tokens []addedToken) error {
	t.added = make(map[string]int32, len(tokens))
	t.maxID = int32(t.model.vocabSize()) - 1
	var raw, normed []addedToken
	for _, a := range tokens {
		if a.ID < 0 {
			return fmt.Errorf("tokenizer.json: added token %q has id %d", a.Content, a.ID)
		}
		// HF gives an added token the model's id when the model has it.
		if id, ok := t.model.tokenToID(a.Content); ok {
			a.ID = id
		}
		t.added[a.Content] = a.ID
		t.maxID = max(t.maxID, a.ID)
		if a.Normalized {
			if t.norm != nil {
				a.Content = t.norm.normalize(a.Content)
			}
			normed = append(normed, a)
		} else {
			raw = append(raw, a)
		}
		if a.Special {
			t.special = append(t.special, a.ID)
		}
	}
	t.raw, t.normed = newAddedMatcher(raw), newAddedMatcher(normed)
	return nil
}

func (t *Tokenizer) setSpecials(pad *padding) {
	if t.post != nil {
		t.special = append(t.special, t.post.specialIDs()...)
	}
	slices.Sort(t.special)
	t.special = slices.Compact(t.special)
	if pad != nil {
		t.pad = pad.PadID
		return
	}
	for _, name := range []string{"<pad>", "[PAD]", "<|pad|>", "<|endoftext|>"} {
		if id, ok := t.TokenToID(name); ok {
			t.pad = id
			return
		}
	}
}

// Encode tokenizes one text. Invalid UTF-8 is read as U+FFFD.
func (t *Tokenizer) Encode(text string, opt Options) Encoding {
	sc := t.scratch.Get().(*scratch)
	defer t.scratch.Put(sc)
	ids := t.tokenize(sc, text)

	added := 0
	if opt.AddSpecialTokens && t.post != nil {
		added = t.post.addedTokens()
	}
	count := len(ids) + added
	limit := opt.MaxTokens
	if limit == 0 {
		limit = t.maxTokens
	}
	if limit > 0 && count > limit {
		// HF truncates the sequence to max_length minus the special tokens,
		// so the specials always survive.
		keep := max(limit-added, 0)
		if t.truncLeft {
			ids = ids[len(ids)-keep:]
		} else {
			ids = ids[:keep]
		}
	}
	out := make([]int32, 0, len(ids)+added)
	if added > 0 {
		out = t.post.process(out, ids)
	} else {
		out = append(out, ids...)
	}
	return Encoding{IDs: out, Count: count}
}

// batchChunk is how many texts a worker claims at a time: large enough to
// amortize the atomic counter, small enough to balance uneven texts.
const batchChunk = 16

// EncodeBatch encodes texts in parallel over GOMAXPROCS workers; the
// result has one Encoding per text, in order.
func (t *Tokenizer) EncodeBatch(texts []string, opt Options) []Encoding {
	out := make([]Encoding, len(texts))
	workers := min(runtime.GOMAXPROCS(0), (len(texts)+batchChunk-1)/batchChunk)
	if workers <= 1 {
		for i, s := range texts {
			out[i] = t.Encode(s, opt)
		}
		return out
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				lo := int(next.Add(batchChunk)) - batchChunk
				if lo >= len(texts) {
					return
				}
				for i := lo; i < min(lo+batchChunk, len(texts)); i++ {
					out[i] = t.Encode(texts[i], opt)
				}
			}
		})
	}
	wg.Wait()
	return out
}

// tokenize returns the model ids of text without special tokens, in
// sc.ids. The pipeline is HF's: added tokens split off the raw text,
// normalization of each remaining piece, added tokens split off the
// normalized text, pre-tokenization, the model.
func (t *Tokenizer) tokenize(sc *scratch, text string) []int32 {
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	ids := sc.ids[:0]
	sc.segs = t.raw.split(sc.segs[:0], text, true)
	for _, seg := range sc.segs {
		if seg.id >= 0 {
			ids = append(ids, seg.id)
			continue
		}
		if seg.text == "" {
			continue
		}
		s := seg.text
		if t.norm != nil {
			s = t.norm.normalize(s)
		}
		if s == "" {
			continue
		}
		sc.inner = t.normed.split(sc.inner[:0], s, seg.atStart)
		for _, in := range sc.inner {
			if in.id >= 0 {
				ids = append(ids, in.id)
				continue
			}
			if in.text == "" {
				continue
			}
			if t.pre == nil {
				ids = t.model.tokenize(ids, in.text)
				continue
			}
			sc.words = preTokenizeAt(t.pre, sc.words[:0], in.text, in.atStart)
			for _, w := range sc.words {
				ids = t.model.tokenize(ids, w)
			}
		}
	}
	clear(sc.words)
	clear(sc.segs)
	clear(sc.inner)
	sc.ids = ids
	return ids
}

// VocabSize is the number of ids: the model's vocabulary and the added
// tokens beyond it. Every id Encode returns is below it.
func (t *Tokenizer) VocabSize() int { return int(t.maxID) + 1 }

// TokenToID is the id of a token: an added token or a model piece.
func (t *Tokenizer) TokenToID(tok string) (int32, bool) {
	if id, ok := t.added[tok]; ok {
		return id, true
	}
	return t.model.tokenToID(tok)
}

// IDToToken is the text of a model piece or added token.
func (t *Tokenizer) IDToToken(id int32) (string, bool) {
	if s, ok := t.model.idToToken(id); ok {
		return s, true
	}
	for s, a := range t.added {
		if a == id {
			return s, true
		}
	}
	return "", false
}

// EncodeIDs is the ids of text with special tokens, cut to maxTokens (0:
// the default limit), and the count before the cut: package engine's
// Tokenizer signature, so engine.TokenizerFunc(t.EncodeIDs) needs no
// adapter type.
func (t *Tokenizer) EncodeIDs(text string, maxTokens int) ([]int32, int) {
	enc := t.Encode(text, Options{AddSpecialTokens: true, MaxTokens: maxTokens})
	return enc.IDs, enc.Count
}

// SpecialIDs are the ids of the special tokens (cls/bos, eos/sep, pad, unk,
// mask and any other added token marked special), sorted. The caller must
// not modify the slice.
func (t *Tokenizer) SpecialIDs() []int32 { return t.special }

// PadID is the padding id: the file's padding section, else the id of a
// conventional pad token; -1 if there is none.
func (t *Tokenizer) PadID() int32 { return t.pad }

// MaxTokens is the default truncation length (special tokens included): the
// file's truncation max_length, else tokenizer_config.json's
// model_max_length beside a file opened with [Load]; 0 means no limit.
func (t *Tokenizer) MaxTokens() int { return t.maxTokens }
