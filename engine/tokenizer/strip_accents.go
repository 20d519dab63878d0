package tokenizer

import "encoding/json"

// stripAccents is HF's normalizers.StripAccents: it drops combining marks
// (HF's is_combining_mark: Mn, Mc and Me) and nothing else, so it removes
// accents only after an NFD or NFKD normalizer has decomposed them; on
// precomposed text it changes nothing.
type stripAccents struct{}

func init() {
	registerNormalizer("StripAccents", func(json.RawMessage) (normalizer, error) {
		return stripAccents{}, nil
	})
}

func (stripAccents) normalize(s string) string { return removeRunes(s, isHFCombiningMark) }
