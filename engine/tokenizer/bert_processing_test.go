package tokenizer

import (
	"slices"
	"testing"
)

func TestClsSepProcessing(t *testing.T) {
	for _, tc := range []struct {
		typ, json string
		want      []int32
	}{
		{"BertProcessing", `{"type":"BertProcessing","sep":["[SEP]",102],"cls":["[CLS]",101]}`, []int32{101, 7, 8, 102}},
		{"BertProcessing", `{"type":"BertProcessing","sep":["</x>",5],"cls":["<x>",4]}`, []int32{4, 7, 8, 5}},
		{"BertProcessing", `{"type":"BertProcessing"}`, []int32{101, 7, 8, 102}},
		{"RobertaProcessing", `{"type":"RobertaProcessing","sep":["</s>",2],"cls":["<s>",0],"trim_offsets":true,"add_prefix_space":true}`, []int32{0, 7, 8, 2}},
		{"RobertaProcessing", `{"type":"RobertaProcessing","sep":["</s>",40],"cls":["<s>",39]}`, []int32{39, 7, 8, 40}},
		{"RobertaProcessing", `{"type":"RobertaProcessing"}`, []int32{0, 7, 8, 2}},
	} {
		p, err := postProcessors[tc.typ]([]byte(tc.json), nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.json, err)
		}
		if got := p.process([]int32{9}, []int32{7, 8}); !slices.Equal(got, append([]int32{9}, tc.want...)) {
			t.Errorf("%s: process = %v, want 9 then %v", tc.json, got, tc.want)
		}
		if got := p.process(nil, nil); !slices.Equal(got, []int32{tc.want[0], tc.want[3]}) {
			t.Errorf("%s: empty sequence = %v", tc.json, got)
		}
		if p.addedTokens() != 2 {
			t.Errorf("%s: addedTokens = %d, want 2", tc.json, p.addedTokens())
		}
		if got := p.specialIDs(); !slices.Equal(got, []int32{tc.want[0], tc.want[3]}) {
			t.Errorf("%s: specialIDs = %v", tc.json, got)
		}
	}
	for _, bad := range []string{`{"cls":["[CLS]","x"]}`, `{"sep":"[SEP]"}`, `[]`} {
		if _, err := postProcessors["BertProcessing"]([]byte(bad), nil); err == nil {
			t.Errorf("%s loaded", bad)
		}
	}
}
