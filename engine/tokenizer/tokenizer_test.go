package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func loadXLMR(t testing.TB) *Tokenizer {
	t.Helper()
	tok, err := Load(filepath.Join(tokenizersDir, "xlmr-unigram.json"))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestAccessors(t *testing.T) {
	tok := loadXLMR(t)
	if got := tok.VocabSize(); got != 8002 {
		t.Errorf("VocabSize = %d, want 8002", got)
	}
	for tokStr, want := range map[string]int32{"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 8001} {
		if id, ok := tok.TokenToID(tokStr); !ok || id != want {
			t.Errorf("TokenToID(%q) = %d, %v; want %d", tokStr, id, ok, want)
		}
	}
	if _, ok := tok.TokenToID("no such piece at all"); ok {
		t.Error("TokenToID found a piece that is not in the vocabulary")
	}
	if got, want := tok.SpecialIDs(), []int32{0, 1, 2, 3, 8001}; !slices.Equal(got, want) {
		t.Errorf("SpecialIDs = %v, want %v", got, want)
	}
	if tok.PadID() != 1 {
		t.Errorf("PadID = %d, want 1", tok.PadID())
	}
	if tok.MaxTokens() != 0 {
		t.Errorf("MaxTokens = %d, want 0 (the file sets no truncation)", tok.MaxTokens())
	}
	legacy, err := Load(filepath.Join(tokenizersDir, "xlmr-unigram-legacy.json"))
	if err != nil {
		t.Fatal(err)
	}
	if legacy.MaxTokens() != 128 {
		t.Errorf("legacy MaxTokens = %d, want the file's 128", legacy.MaxTokens())
	}
}

func TestEncodeSpecialsAndTruncation(t *testing.T) {
	tok := loadXLMR(t)
	text := strings.Repeat("hello world ", 40)
	body := tok.Encode(text, Options{MaxTokens: -1}).IDs
	full := tok.Encode(text, Options{AddSpecialTokens: true})
	if want := append(append([]int32{0}, body...), 2); !slices.Equal(full.IDs, want) {
		t.Fatalf("with specials %v, want <s> body </s> = %v", full.IDs, want)
	}
	if full.Count != len(body)+2 {
		t.Errorf("Count = %d, want %d", full.Count, len(body)+2)
	}
	cut := tok.Encode(text, Options{AddSpecialTokens: true, MaxTokens: 10})
	if want := append(append([]int32{0}, body[:8]...), 2); !slices.Equal(cut.IDs, want) {
		t.Errorf("cut to 10: %v, want %v", cut.IDs, want)
	}
	if cut.Count != full.Count {
		t.Errorf("cut Count = %d, want %d (before truncation)", cut.Count, full.Count)
	}
	if got := tok.Encode("", Options{AddSpecialTokens: true}); !slices.Equal(got.IDs, []int32{0, 2}) || got.Count != 2 {
		t.Errorf("empty text: %+v", got)
	}
}

func TestEncodeAddedTokens(t *testing.T) {
	tok := loadXLMR(t)
	// <mask> strips the whitespace on its left; a literal <s> is its id.
	a := tok.Encode("Paris is <mask>.", Options{})
	b := tok.Encode("Paris is<mask>.", Options{})
	if !slices.Equal(a.IDs, b.IDs) || !slices.Contains(a.IDs, 8001) {
		t.Errorf("lstrip: %v vs %v", a.IDs, b.IDs)
	}
	if got := tok.Encode("<s>", Options{}); !slices.Equal(got.IDs, []int32{0}) {
		t.Errorf("literal <s>: %v", got.IDs)
	}
}

func TestEncodeInvalidUTF8(t *testing.T) {
	tok := loadXLMR(t)
	got := tok.Encode("a\xffb", Options{})
	want := tok.Encode("a\uFFFDb", Options{})
	if !slices.Equal(got.IDs, want.IDs) {
		t.Errorf("invalid UTF-8: %v, want as U+FFFD %v", got.IDs, want.IDs)
	}
}

func TestEncodeBatchMatchesEncode(t *testing.T) {
	tok := loadXLMR(t)
	texts := parityCorpus(t)
	opt := Options{AddSpecialTokens: true, MaxTokens: 100}
	got := tok.EncodeBatch(texts, opt)
	for i, s := range texts {
		if want := tok.Encode(s, opt); !slices.Equal(got[i].IDs, want.IDs) || got[i].Count != want.Count {
			t.Fatalf("text %d: batch %+v, single %+v", i, got[i], want)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	base, err := os.ReadFile(filepath.Join(tokenizersDir, "xlmr-unigram.json"))
	if err != nil {
		t.Fatal(err)
	}
	mutate := func(key, value string) []byte {
		var doc map[string]json.RawMessage
		if err := json.Unmarshal(base, &doc); err != nil {
			t.Fatal(err)
		}
		doc[key] = json.RawMessage(value)
		out, _ := json.Marshal(doc)
		return out
	}
	for _, tc := range []struct {
		name, key, value string
		unsupported      bool
		mention          string
	}{
		{"normalizer", "normalizer", `{"type":"NoSuchNormalizer"}`, true, "NoSuchNormalizer"},
		{"nested normalizer", "normalizer", `{"type":"Sequence","normalizers":[{"type":"Nope"}]}`, true, "Nope"},
		{"pre-tokenizer", "pre_tokenizer", `{"type":"ByteLevel","add_prefix_space":false}`, true, "ByteLevel"},
		{"model", "model", `{"type":"BPE","vocab":{},"merges":[]}`, true, "BPE"},
		{"post-processor", "post_processor", `{"type":"ByteLevel"}`, true, "ByteLevel"},
		{"regex", "normalizer", `{"type":"Replace","pattern":{"Regex":"(?=a)"},"content":""}`, true, "(?=a)"},
		{"prepend scheme", "pre_tokenizer", `{"type":"Metaspace","replacement":"▁","prepend_scheme":"sometimes"}`, true, "sometimes"},
		{"charsmap", "normalizer", `{"type":"Precompiled","precompiled_charsmap":"AAAA"}`, false, "charsmap"},
		{"no model", "model", `null`, false, "no model"},
		{"empty vocab", "model", `{"type":"Unigram","unk_id":0,"vocab":[]}`, false, "empty"},
		{"unk out of range", "model", `{"type":"Unigram","unk_id":5,"vocab":[["a",0]]}`, false, "unk_id"},
		{"truncation", "truncation", `{"max_length":0}`, false, "max_length"},
	} {
		_, err := FromJSON(mutate(tc.key, tc.value))
		if err == nil {
			t.Errorf("%s: loaded", tc.name)
			continue
		}
		if errors.Is(err, ErrUnsupported) != tc.unsupported || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%s: error %q (unsupported=%v), want mention of %q and unsupported=%v",
				tc.name, err, errors.Is(err, ErrUnsupported), tc.mention, tc.unsupported)
		}
	}
	if _, err := FromJSON([]byte("{")); err == nil {
		t.Error("truncated JSON loaded")
	}
}

func TestLoadTokenizerConfigMaxLength(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join(tokenizersDir, "xlmr-unigram.json"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "tokenizer.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"model_max_length": 8192}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tok, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if tok.MaxTokens() != 8192 {
		t.Errorf("MaxTokens = %d, want tokenizer_config.json's 8192", tok.MaxTokens())
	}
	long := strings.Repeat("word ", 9000)
	if got := tok.Encode(long, Options{AddSpecialTokens: true}); len(got.IDs) != 8192 || got.Count <= 8192 {
		t.Errorf("default cut: %d ids, count %d", len(got.IDs), got.Count)
	}
}
