package tokenizer

import (
	"encoding/json"
	"fmt"
)

func init() {
	registerPostProcessor("TemplateProcessing", newTemplate)
}

// template is HF's TemplateProcessing for single sequences: the ids of the
// special-token pieces around the sequence $A (the pair template is unused:
// jetembed encodes single texts).
type template struct {
	before, after []int32
	special       []int32
}

func newTemplate(raw json.RawMessage, _ func(string) (int32, bool)) (postProcessor, error) {
	var cfg struct {
		Single []struct {
			SpecialToken *struct {
				ID string `json:"id"`
			}
			Sequence *struct {
				ID string `json:"id"`
			}
		} `json:"single"`
		SpecialTokens map[string]struct {
			IDs []int32 `json:"ids"`
		} `json:"special_tokens"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("template processing: %w (only the list form of \"single\" is supported)", err)
	}
	t := &template{}
	seen := false
	for _, piece := range cfg.Single {
		switch {
		case piece.Sequence != nil:
			if piece.Sequence.ID != "A" || seen {
				return nil, fmt.Errorf("%w: template processing: single template with sequence %q", ErrUnsupported, piece.Sequence.ID)
			}
			seen = true
		case piece.SpecialToken != nil:
			st, ok := cfg.SpecialTokens[piece.SpecialToken.ID]
			if !ok {
				return nil, fmt.Errorf("template processing: special token %q is not in special_tokens", piece.SpecialToken.ID)
			}
			if seen {
				t.after = append(t.after, st.IDs...)
			} else {
				t.before = append(t.before, st.IDs...)
			}
			t.special = append(t.special, st.IDs...)
		default:
			return nil, fmt.Errorf("template processing: empty template piece")
		}
	}
	if !seen {
		return nil, fmt.Errorf("template processing: single template has no $A")
	}
	return t, nil
}

func (t *template) addedTokens() int { return len(t.before) + len(t.after) }

func (t *template) process(dst []int32, ids []int32) []int32 {
	dst = append(dst, t.before...)
	dst = append(dst, ids...)
	return append(dst, t.after...)
}

func (t *template) specialIDs() []int32 { return t.special }
