package tokenizer

import "encoding/json"

func init() {
	// RobertaProcessing adds <s> $A </s>. Its trim_offsets and
	// add_prefix_space only move offsets, which jetembed does not track, so
	// for ids it is BertProcessing with other defaults.
	registerPostProcessor("RobertaProcessing", func(raw json.RawMessage, _ func(string) (int32, bool)) (postProcessor, error) {
		return newClsSepProcessing("RobertaProcessing", raw, 0, 2)
	})
}
