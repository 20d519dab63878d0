package model

import (
	"encoding/json"
	"fmt"
	"os"
)

// Config is what jetembed needs from a HuggingFace-style config.json.
type Config struct {
	ModelType             string
	HiddenSize            int
	MaxPositionEmbeddings int
	VocabSize             int
	PadID, BOSID, EOSID   int
	// MaxTokens is the longest input the graph accepts, special tokens
	// included: XLM-R positions start at pad_id+1, so two positions are
	// never available to tokens (8192 for BGE-M3).
	MaxTokens int
	// Layers, Heads and Intermediate size the engine's cost and memory
	// models; absent values take BERT's ratios (12 layers, one head per
	// 64 hidden units, intermediate 4 x hidden).
	Layers, Heads, Intermediate int
}

type rawConfig struct {
	ModelType             string `json:"model_type"`
	HiddenSize            int    `json:"hidden_size"`
	MaxPositionEmbeddings int    `json:"max_position_embeddings"`
	VocabSize             int    `json:"vocab_size"`
	// Pointers, because 0 is a valid id (bos) and absence means "XLM-R default".
	PadID *int `json:"pad_token_id"`
	BOSID *int `json:"bos_token_id"`
	EOSID *int `json:"eos_token_id"`

	Layers       int `json:"num_hidden_layers"`
	Heads        int `json:"num_attention_heads"`
	Intermediate int `json:"intermediate_size"`
}

// readConfig parses and checks config.json. Absent special ids take the
// XLM-R values (pad 1, bos 0, eos 2) that BGE-M3 uses.
func readConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	var rc rawConfig
	if err := json.Unmarshal(b, &rc); err != nil {
		return Config{}, fmt.Errorf("%w: %s: %w", ErrInvalid, path, err)
	}
	c := Config{
		ModelType:             rc.ModelType,
		HiddenSize:            rc.HiddenSize,
		MaxPositionEmbeddings: rc.MaxPositionEmbeddings,
		VocabSize:             rc.VocabSize,
		PadID:                 orDefault(rc.PadID, 1),
		BOSID:                 orDefault(rc.BOSID, 0),
		EOSID:                 orDefault(rc.EOSID, 2),
		Layers:                rc.Layers,
		Heads:                 rc.Heads,
		Intermediate:          rc.Intermediate,
	}
	switch {
	case c.HiddenSize <= 0:
		return Config{}, fmt.Errorf("%w: %s: hidden_size %d must be positive", ErrInvalid, path, c.HiddenSize)
	case c.MaxPositionEmbeddings <= 2:
		return Config{}, fmt.Errorf("%w: %s: max_position_embeddings %d must be above 2", ErrInvalid, path, c.MaxPositionEmbeddings)
	case c.VocabSize <= 0:
		return Config{}, fmt.Errorf("%w: %s: vocab_size %d must be positive", ErrInvalid, path, c.VocabSize)
	}
	for _, id := range []int{c.PadID, c.BOSID, c.EOSID} {
		if id < 0 || id >= c.VocabSize {
			return Config{}, fmt.Errorf("%w: %s: special token id %d outside vocab_size %d", ErrInvalid, path, id, c.VocabSize)
		}
	}
	c.MaxTokens = c.MaxPositionEmbeddings - 2
	if c.Layers <= 0 {
		c.Layers = 12
	}
	if c.Heads <= 0 {
		c.Heads = max(1, c.HiddenSize/64)
	}
	if c.Intermediate <= 0 {
		c.Intermediate = 4 * c.HiddenSize
	}
	return c, nil
}

func orDefault(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

// paddingOffset are the model types whose position ids start after the
// padding id and skip padding (transformers' create_position_ids_from_input_ids).
var paddingOffset = map[string]bool{
	"": true, "xlm-roberta": true, "xlm-roberta-xl": true, "roberta": true,
	"camembert": true, "data2vec-text": true, "mpnet": true,
}

// PositionIDs fills dst with the position ids of a graph that takes them
// as an input, for ids (batch x seq, row-major, padded with PadID): for
// the XLM-R family, as transformers' create_position_ids_from_input_ids
// computes them (PadID + 1 + the index among the row's non-pad tokens,
// PadID at padding); for other model types (BERT) 0..seq-1 on every row.
func (c Config) PositionIDs(dst, ids []int64, seq int) {
	pad := int64(c.PadID)
	offset := paddingOffset[c.ModelType]
	for r := 0; r+seq <= len(ids); r += seq {
		n := int64(0)
		for i, id := range ids[r : r+seq] {
			switch {
			case !offset:
				dst[r+i] = int64(i)
			case id == pad:
				dst[r+i] = pad
			default:
				n++
				dst[r+i] = pad + n
			}
		}
	}
}
