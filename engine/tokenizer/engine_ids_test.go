package tokenizer

import (
	"path/filepath"
	"slices"
	"testing"
)

// TestEncodeIDs: the engine's signature gives the ids and count of Encode
// with special tokens, cut to the limit.
func TestEncodeIDs(t *testing.T) {
	tok, err := Load(filepath.Join(tokenizersDir, "xlmr-unigram.json"))
	if err != nil {
		t.Fatal(err)
	}
	text := "Hello world, this is a longer sentence than four tokens."
	for _, max := range []int{0, 4} {
		want := tok.Encode(text, Options{AddSpecialTokens: true, MaxTokens: max})
		ids, count := tok.EncodeIDs(text, max)
		if !slices.Equal(ids, want.IDs) || count != want.Count {
			t.Errorf("max %d: EncodeIDs = %v, %d; Encode = %v, %d", max, ids, count, want.IDs, want.Count)
		}
	}
	if ids, count := tok.EncodeIDs(text, 4); len(ids) != 4 || count <= 4 {
		t.Errorf("cut to 4: %d ids, count %d", len(ids), count)
	}
}
