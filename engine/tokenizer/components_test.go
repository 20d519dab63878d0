package tokenizer

import (
	"encoding/base64"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rivo/uniseg"
	"golang.org/x/text/unicode/norm"
)

func TestPieceTrie(t *testing.T) {
	pieces := []string{"a", "ab", "abc", "b", "", "ab", "日本", "日", "\xff"}
	tr := newPieceTrie(pieces)
	for s, want := range map[string]int32{"a": 0, "ab": 5, "abc": 2, "b": 3, "日本": 6, "日": 7, "\xff": 8} {
		if got, ok := tr.lookup(s); !ok || got != want {
			t.Errorf("lookup(%q) = %d, %v; want %d", s, got, ok, want)
		}
	}
	for _, s := range []string{"", "abcd", "c", "本", "日本語"} {
		if id, ok := tr.lookup(s); ok {
			t.Errorf("lookup(%q) = %d, want none", s, id)
		}
	}
	// Wide nodes use the binary search: every child must stay reachable.
	var wide []string
	for c := 0; c < 256; c++ {
		wide = append(wide, "x"+string(rune(c)), "x"+string([]byte{byte(c)}))
	}
	tr = newPieceTrie(wide)
	for i, s := range wide {
		got, ok := tr.lookup(s)
		if !ok || wide[got] != s {
			t.Fatalf("wide lookup %d %q = %d, %v", i, s, got, ok)
		}
	}
}

func TestUnigramViterbi(t *testing.T) {
	// "ab" as one piece beats "a"+"b"; an unknown run fuses into one <unk>;
	// on a tie the node keeps the candidate found first, as in HF.
	u, err := newUnigramModel([]string{"<unk>", "a", "b", "ab", "c", "cd", "d"}, []float64{0, -1, -1, -1.5, -1, -2, -1}, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		word string
		want []int32
	}{
		{"ab", []int32{3}},
		{"abzzq", []int32{3, 0}},
		{"zab", []int32{0, 3}},
		{"cd", []int32{5}}, // c+d ties with cd: the candidate from the earlier start stays
		{"", nil},
	} {
		if got := u.tokenize(nil, tc.word); !slices.Equal(got, tc.want) {
			t.Errorf("tokenize(%q) = %v, want %v", tc.word, got, tc.want)
		}
	}
	bf, err := newUnigramModel([]string{"<unk>", "a", "<0xC3>", "<0xA9>"}, []float64{0, -1, -5, -5}, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := bf.tokenize(nil, "aé"); !slices.Equal(got, []int32{1, 2, 3}) {
		t.Errorf("byte fallback: %v, want [1 2 3]", got)
	}
	if got := bf.tokenize(nil, "a日"); !slices.Equal(got, []int32{1, 0}) {
		t.Errorf("byte fallback without byte pieces: %v, want [1 0]", got)
	}
}

func TestMetaspace(t *testing.T) {
	for _, tc := range []struct {
		cfg     string
		in      string
		atStart bool
		want    []string
	}{
		{`{"prepend_scheme":"always","split":true}`, "hello big world", false, []string{"▁hello", "▁big", "▁world"}},
		{`{"prepend_scheme":"always","split":true}`, " a  b", true, []string{"▁a", "▁", "▁b"}},
		{`{"prepend_scheme":"first","split":true}`, "a b", false, []string{"a", "▁b"}},
		{`{"prepend_scheme":"first","split":true}`, "a b", true, []string{"▁a", "▁b"}},
		{`{"prepend_scheme":"never","split":false}`, "a b", true, []string{"a▁b"}},
		{`{"add_prefix_space":true}`, "a b", false, []string{"▁a", "▁b"}},
		{`{"add_prefix_space":false,"replacement":"_"}`, "a b_", true, []string{"a", "_b", "_"}},
		{`{"str_rep":"#","add_prefix_space":true}`, "x", true, []string{"#x"}},
	} {
		p, err := newMetaspace(json.RawMessage(tc.cfg))
		if err != nil {
			t.Fatalf("%s: %v", tc.cfg, err)
		}
		if got := p.(startAwarePreTokenizer).preTokenizeAt(nil, tc.in, tc.atStart); !slices.Equal(got, tc.want) {
			t.Errorf("%s on %q (start %v) = %q, want %q", tc.cfg, tc.in, tc.atStart, got, tc.want)
		}
	}
}

func TestNormalizers(t *testing.T) {
	for _, tc := range []struct{ cfg, in, want string }{
		{`{"type":"Lowercase"}`, "ÀİΣx", "ài̇σx"},
		{`{"type":"NFKC"}`, "ﬁ①", "fi1"},
		{`{"type":"NFD"}`, "é", "e\u0301"},
		{`{"type":"Strip","strip_left":true,"strip_right":false}`, "\u3000 a ", "a "},
		{`{"type":"Prepend","prepend":"▁"}`, "a", "▁a"},
		{`{"type":"Prepend","prepend":"▁"}`, "", ""},
		{`{"type":"Replace","pattern":{"String":"aa"},"content":"b"}`, "aaa", "ba"},
		{`{"type":"Replace","pattern":{"Regex":" {2,}"},"content":"▁"}`, "a  b   c d", "a▁b▁c d"},
		{`{"type":"Replace","pattern":{"Regex":"\\s+"},"content":"_"}`, "a\u3000\u2028b", "a_b"},
		{`{"type":"Replace","pattern":{"Regex":"[\\d]"},"content":"#"}`, "a١2", "a##"},
	} {
		n, err := buildNormalizer(json.RawMessage(tc.cfg))
		if err != nil {
			t.Fatalf("%s: %v", tc.cfg, err)
		}
		if got := n.normalize(tc.in); got != tc.want {
			t.Errorf("%s on %q = %q, want %q", tc.cfg, tc.in, got, tc.want)
		}
	}
}

// TestPrecompiledMalformed feeds random charsmaps and cuts of the real
// nmt_nfkc one: loading may fail, normalizing must not panic and must give
// valid UTF-8 for valid input.
func TestPrecompiledMalformed(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	texts := []string{"abc", "é\u0301", "日本語", "\x00\x01", "👨‍👩‍👧", "ｶﾞ①\r\n"}
	var blobs [][]byte
	for range 500 {
		blob := make([]byte, 4+r.IntN(64))
		for i := range blob {
			blob[i] = byte(r.IntN(256))
		}
		blob[0], blob[1], blob[2], blob[3] = byte(r.IntN(len(blob))&^3), 0, 0, 0
		blobs = append(blobs, blob)
	}
	nfkc := realCharsmap(t)
	for range 200 {
		cut := slices.Clone(nfkc[:4+r.IntN(len(nfkc)-4)])
		if r.IntN(2) == 0 {
			cut[4+r.IntN(len(cut)-4)] ^= byte(1 + r.IntN(255))
		}
		blobs = append(blobs, cut)
	}
	parsed := 0
	for _, blob := range blobs {
		p, err := parsePrecompiled(blob)
		if err != nil {
			continue
		}
		parsed++
		for _, s := range texts {
			if out := p.normalize(s); !utf8.ValidString(out) {
				t.Fatalf("charsmap of %d bytes turned %q into invalid UTF-8 %q", len(blob), s, out)
			}
		}
	}
	t.Logf("%d of %d charsmaps parsed", parsed, len(blobs))
	if parsed < len(blobs)/10 {
		t.Fatalf("only %d of %d charsmaps parsed: the test exercises too little of normalize", parsed, len(blobs))
	}
}

// realCharsmap is the decoded nmt_nfkc charsmap of the committed XLM-R
// tokenizer.
func realCharsmap(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(tokenizersDir, "xlmr-unigram.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Normalizer struct {
			Normalizers []struct {
				Type     string `json:"type"`
				Charsmap string `json:"precompiled_charsmap"`
			} `json:"normalizers"`
		} `json:"normalizer"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	for _, n := range f.Normalizer.Normalizers {
		if n.Type == "Precompiled" {
			blob, err := base64.StdEncoding.DecodeString(n.Charsmap)
			if err != nil {
				t.Fatal(err)
			}
			return blob
		}
	}
	t.Fatal("no Precompiled normalizer in xlmr-unigram.json")
	return nil
}

// TestNormalizeUnbounded checks the slow path against x/text where x/text's
// stream-safe limit does not kick in, then on a long run where it does.
func TestNormalizeUnbounded(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	pool := []string{"a", "e", "A", "ﬁ", "각", "ᄀ", "ᅡ", "ᆨ", "\u0301", "\u0316", "\u0334", "\u0345", "\u0308", "ω", "Å", "ｶ", "ﾞ", "①", "\u0f73", "\u1e9b", "\u0f71"}
	forms := map[string]norm.Form{"NFC": norm.NFC, "NFD": norm.NFD, "NFKC": norm.NFKC, "NFKD": norm.NFKD}
	for range 2000 {
		var b strings.Builder
		for range r.IntN(12) {
			b.WriteString(pool[r.IntN(len(pool))])
		}
		s := b.String()
		for name, f := range forms {
			if got, want := normalizeUnbounded(f, s), f.String(s); got != want {
				t.Fatalf("%s(%+q) = %+q, want %+q", name, s, got, want)
			}
		}
	}
	long := "e" + strings.Repeat("\u0301\u0316", 40)
	want := "é" + strings.Repeat("\u0316", 40) + strings.Repeat("\u0301", 39)
	if got := normalizeForm(norm.NFC, long); got != want {
		t.Errorf("NFC of a 80-mark run = %+q, want %+q", got, want)
	}
}

// TestNextGrapheme checks the lone-character fast path against uniseg's
// segmentation on random text, over the whole BMP and some astral planes.
func TestNextGrapheme(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	pick := func() rune {
		switch r.IntN(4) {
		case 0:
			return rune(r.IntN(0x80))
		case 1:
			return []rune("\r\n\u0301\u200d\u0903\u0600\u1100\u1161\u11a8\uac00\U0001F1E6\U0001F600\u094d\u0915")[r.IntN(14)]
		case 2:
			return rune(0x1F000 + r.IntN(0x1000))
		}
		c := rune(r.IntN(0x10000))
		if c >= 0xD800 && c <= 0xDFFF {
			c = 'x'
		}
		return c
	}
	for range 20000 {
		rs := make([]rune, 1+r.IntN(8))
		for i := range rs {
			rs[i] = pick()
		}
		s := string(rs)
		var got, want []string
		state := -1
		for rest := s; rest != ""; {
			var g string
			g, rest, state = nextGrapheme(rest, state)
			got = append(got, g)
		}
		gr := uniseg.NewGraphemes(s)
		for gr.Next() {
			want = append(want, gr.Str())
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%+q: clusters %+q, uniseg %+q", s, got, want)
		}
	}
}
