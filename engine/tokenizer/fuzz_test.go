package tokenizer

import (
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

var fuzzTokenizers = sync.OnceValues(func() ([]*Tokenizer, error) {
	files, err := filepath.Glob(filepath.Join(tokenizersDir, "*.json"))
	if err != nil {
		return nil, err
	}
	var toks []*Tokenizer
	for _, f := range files {
		tok, err := Load(f)
		if err != nil {
			return nil, err
		}
		toks = append(toks, tok)
	}
	return toks, nil
})

// FuzzEncode checks, for every test tokenizer, that Encode never panics,
// returns ids in the vocabulary, respects the limit, reports the count
// before truncation, and that a truncated encoding is a cut of the full one.
func FuzzEncode(f *testing.F) {
	for _, s := range []string{"", " ", "Hello <mask> world", "<s></s>", "e\u0301\u0301", "\r\n\u3000\u2028", "👨‍👩‍👧", "\xff\xfe"} {
		f.Add(s, 8, true)
	}
	toks, err := fuzzTokenizers()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, text string, maxTokens int, special bool) {
		maxTokens %= 1 << 12
		for _, tok := range toks {
			full := tok.Encode(text, Options{AddSpecialTokens: special, MaxTokens: -1})
			got := tok.Encode(text, Options{AddSpecialTokens: special, MaxTokens: maxTokens})
			checkEncoding(t, tok, full, got, maxTokens, special)
		}
	})
}

func checkEncoding(t *testing.T, tok *Tokenizer, full, got Encoding, limit int, special bool) {
	t.Helper()
	for _, id := range got.IDs {
		if id < 0 || int(id) >= tok.VocabSize() {
			t.Fatalf("id %d outside vocabulary of %d", id, tok.VocabSize())
		}
	}
	if full.Count != len(full.IDs) {
		t.Fatalf("untruncated: count %d, %d ids", full.Count, len(full.IDs))
	}
	if got.Count != full.Count {
		t.Fatalf("count %d with limit %d, %d without", got.Count, limit, full.Count)
	}
	if got.Count < len(got.IDs) {
		t.Fatalf("count %d < %d ids", got.Count, len(got.IDs))
	}
	if limit == 0 {
		limit = tok.MaxTokens()
	}
	added := 0
	if special && tok.post != nil {
		added = tok.post.addedTokens()
	}
	if limit <= 0 || full.Count <= limit {
		if !slices.Equal(got.IDs, full.IDs) {
			t.Fatalf("limit %d not reached, yet ids differ: %v vs %v", limit, got.IDs, full.IDs)
		}
		return
	}
	if len(got.IDs) > max(limit, added) {
		t.Fatalf("%d ids over the limit %d", len(got.IDs), limit)
	}
	// The cut keeps the specials and a prefix (or suffix) of the body.
	fb, gb := stripSpecials(tok, full.IDs, special), stripSpecials(tok, got.IDs, special)
	if tok.truncLeft {
		if !slices.Equal(fb[len(fb)-len(gb):], gb) {
			t.Fatalf("left cut %v is not a suffix of %v", gb, fb)
		}
	} else if !slices.Equal(fb[:len(gb)], gb) {
		t.Fatalf("cut %v is not a prefix of %v", gb, fb)
	}
}

// stripSpecials removes the post-processor's tokens around the body.
func stripSpecials(tok *Tokenizer, ids []int32, special bool) []int32 {
	if !special || tok.post == nil {
		return ids
	}
	marker := []int32{-7}
	wrapped := tok.post.process(nil, marker)
	i := slices.Index(wrapped, -7)
	return ids[i : len(ids)-(len(wrapped)-i-1)]
}
