package tokenizer

import (
	"encoding/json"
	"fmt"
)

// bertProcessing is HF's processors.BertProcessing ([CLS] $A [SEP]); the
// same shape serves processors.RobertaProcessing (<s> $A </s>), whose offset
// trimming does not change ids.
type bertProcessing struct {
	cls, sep int32
}

func init() {
	registerPostProcessor("BertProcessing", func(raw json.RawMessage, _ func(string) (int32, bool)) (postProcessor, error) {
		return newClsSepProcessing("BertProcessing", raw, 101, 102)
	})
}

// newClsSepProcessing reads the {"cls": [token, id], "sep": [token, id]}
// pairs of BertProcessing and RobertaProcessing. HF uses the ids written in
// the file, not a vocabulary lookup of the tokens; absent pairs take HF's
// defaults.
func newClsSepProcessing(name string, raw json.RawMessage, clsID, sepID int32) (postProcessor, error) {
	var cfg struct {
		Cls *[2]json.RawMessage `json:"cls"`
		Sep *[2]json.RawMessage `json:"sep"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &bertProcessing{cls: clsID, sep: sepID}
	for _, f := range []struct {
		pair *[2]json.RawMessage
		id   *int32
		what string
	}{{cfg.Cls, &p.cls, "cls"}, {cfg.Sep, &p.sep, "sep"}} {
		if f.pair == nil {
			continue
		}
		if err := json.Unmarshal(f.pair[1], f.id); err != nil {
			return nil, fmt.Errorf("%s: %s id: %w", name, f.what, err)
		}
	}
	return p, nil
}

func (p *bertProcessing) addedTokens() int { return 2 }

func (p *bertProcessing) process(dst []int32, ids []int32) []int32 {
	dst = append(dst, p.cls)
	dst = append(dst, ids...)
	return append(dst, p.sep)
}

func (p *bertProcessing) specialIDs() []int32 { return []int32{p.cls, p.sep} }
